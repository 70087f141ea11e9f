package kahuna

import (
	"github.com/kahunago/kahuna/internal/node"
	"github.com/kahunago/kahuna/internal/testhooks"
)

// The module's tests reach the node under a Node, and switch a Lock's
// safety rules off for negative controls, through these hooks
// (internal/testknobs); outside the module they cannot be named.
func init() {
	testhooks.Inner = func(n *Node) *node.Node { return n.n }
	testhooks.WithoutLateExtendCap = func() AcquireOption {
		return func(o *acquireOptions) { o.noExtendCap = true }
	}
	testhooks.WithoutDeadline = func() AcquireOption {
		return func(o *acquireOptions) { o.noDeadline = true }
	}
	testhooks.ClientNative = func(c *Client) (native, known bool) {
		if c.grpc == nil {
			return false, true
		}
		return c.grpc.Native()
	}
}
