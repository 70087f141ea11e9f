// Package transport is the wire layer of kahuna: it serves any
// lease.Locker over Kahuna's gRPC protocol (service "Locker", see
// proto/locks.proto) and Kahuna's REST API, and it provides a Client that
// implements lease.Locker against such a server (ours or Kahuna's).
//
// Server side, one listener carries both HTTP/1.1 REST and cleartext
// HTTP/2 gRPC (Kahuna's clients use one base URL for both); a second,
// native gRPC listener and a TLS listener serve the same service.
//
// Client side, calls are multiplexed over a long-lived
// BatchClientLockRequests stream per endpoint (or several:
// WithStreamsPerEndpoint), answered out of order and matched by
// RequestId, as Kahuna's own client does.
//
// Both sides encode and decode the batch streams' messages by hand
// (wire.go), byte for byte as the generated code does (the tests compare
// them); the unary calls use the generated code.
package transport
