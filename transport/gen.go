package transport

// The Go code in lockspb and kahunav1pb is generated from proto/locks.proto
// and proto/kahuna_v1.proto and checked
// in; regenerate it after editing the .proto with `go generate ./transport`
// (gen.sh pins the protoc plugin versions and says what else it needs).
//go:generate bash proto/gen.sh
