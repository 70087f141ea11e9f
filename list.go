package kahuna

import (
	"context"
	"errors"

	"github.com/kahunago/kahuna/lease"
)

// ListedLock is one live lock of a listing: its name, owner, fencing
// token, lease end (wall clock, millisecond precision over a wire) and
// durability; for a semaphore or a read/write lock, its Holders.
type ListedLock = lease.ListedLock

// Holder is one live holder of a listed semaphore (its slot, owner,
// fencing token and lease end) or read/write lock (a reader, or the
// writer; the token is the write epoch).
type Holder = lease.Holder

// LockPage is one page of a listing, in name order. Next, when not "",
// is the cursor of the next page (WithAfter): there may be more locks
// after it; "" means the listing is complete.
type LockPage = lease.LockPage

// Limits of a listing: a page holds DefaultListLimit locks unless
// WithLimit says otherwise, and at most MaxListLimit.
const (
	DefaultListLimit = lease.DefaultListLimit
	MaxListLimit     = lease.MaxListLimit
)

// ListOption tunes List.
type ListOption func(*lease.ListRequest)

// WithLimit sets the page size of List: 1 to MaxListLimit (0: the
// default, DefaultListLimit).
func WithLimit(n int) ListOption { return func(r *lease.ListRequest) { r.Limit = n } }

// WithAfter starts List after the name after: the Next of the page
// before.
func WithAfter(after string) ListOption { return func(r *lease.ListRequest) { r.After = after } }

// listRequest builds List's request.
func listRequest(prefix string, opts []ListOption) lease.ListRequest {
	req := lease.ListRequest{Prefix: prefix}
	for _, o := range opts {
		o(&req)
	}
	return req
}

// listError turns a refused list into a *StatusError.
func listError(prefix string, err error) error {
	var le *lease.ListError
	if errors.As(err, &le) {
		return &StatusError{Op: "list", Resource: prefix, Status: le.Status, Reason: le.Reason}
	}
	return err
}

// List returns a page of the live locks whose name starts with prefix
// ("": every lock), ephemeral and persistent, in name order, at most
// WithLimit of them, after the name given by WithAfter. Each partition's
// locks are read by its leader, which this node asks through the admin
// API for the partitions it does not lead; a page is no snapshot of the
// cluster (a lock taken or released while it is read may be in it or
// not), but a lock live through the whole listing is in exactly one page.
// A bad limit or an over-long prefix or cursor is a *StatusError with
// InvalidInput and reads nothing; a partition with no leader that
// answers (being elected, or moving) fails the page with MustRetry: list
// again.
func (n *Node) List(ctx context.Context, prefix string, opts ...ListOption) (LockPage, error) {
	page, err := n.n.List(ctx, listRequest(prefix, opts))
	return page, listError(prefix, err)
}

// List is Node.List over REST (GET /v1/locks), whatever the client
// speaks for locks: the gRPC services have no listing. A MustRetry is
// asked again within the client's MustRetry budget (WithMustRetryBudget)
// before it is returned.
func (c *Client) List(ctx context.Context, prefix string, opts ...ListOption) (LockPage, error) {
	if c.rest == nil {
		return LockPage{}, c.restErr
	}
	page, err := c.rest.List(ctx, listRequest(prefix, opts))
	return page, listError(prefix, err)
}
