// Package testhooks holds what the module's tests reach under the public
// API: the root package sets each hook in its init, and
// internal/testknobs calls them with their types. They are typed any
// because this package sits below the root (which imports it) and so
// cannot name the root's types; being internal, nothing outside the
// module can reach them, so the public API stays as it is.
package testhooks

// Each hook below is set by the root package; its comment gives its type.
var (
	// Inner is func(*kahuna.Node) *node.Node: the node machinery under a
	// Node, for its test hooks, stats and admin views.
	Inner any

	// WithoutLateExtendCap is func() kahuna.AcquireOption: the Lock's
	// deadline ignores an Extend of unknown outcome, which may be
	// delivered late and shorten the lease (a negative control).
	WithoutLateExtendCap any

	// WithoutDeadline is func() kahuna.AcquireOption: the Lock ignores
	// its deadline and is lost only when an answer says the lease is
	// gone (a negative control).
	WithoutDeadline any

	// ClientNative is func(*kahuna.Client) (native, known bool): whether
	// the client's server offers the native service.
	ClientNative any
)
