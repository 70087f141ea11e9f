package kahuna

import "github.com/kahunago/kahuna/internal/node"

// The one export file: what the external tests reach that the public API
// hides. Test knobs go through Config.TestingKnobs (knobs_test.go).

// Inner is the node machinery under n, for tests that read its stats and
// admin views.
func Inner(n *Node) *node.Node { return n.n }

// WithoutLateExtendCap is an AcquireOption that switches the handle's
// cap for an Extend of unknown outcome off: the Lock's deadline ignores
// such an Extend, which may be delivered late and shorten the lease (the
// server's lease ends its ttl after it applies), as before the cap. A
// negative control: the fault suite's handle clients must be found
// holding past their lease.
func WithoutLateExtendCap() AcquireOption {
	return func(o *acquireOptions) { o.noExtendCap = true }
}

// ClientNative reports whether c's server offers the native service (tests).
func ClientNative(c *Client) (native, known bool) {
	if c.grpc == nil {
		return false, true
	}
	return c.grpc.Native()
}

// WithoutDeadline is an AcquireOption under which the Lock ignores its
// deadline: it is lost only when an answer says the lease is gone, as
// etcd's Campaign keeps a leader whose session lapsed until it hears of
// it. A negative control: the election fault test must find two leaders.
func WithoutDeadline() AcquireOption {
	return func(o *acquireOptions) { o.noDeadline = true }
}
