package transport

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/kahunago/kahuna/lease"
)

// maxRoutes bounds the routes a Client remembers; past it they are
// forgotten all at once and learned again.
const maxRoutes = 1 << 16

// routes remembers, per partition key (lease.PartitionKey), the endpoint
// that served it last: a node names the leader it forwarded a call to in
// the answer's ServedFrom, so the client's next call for that key goes to
// the leader and skips the hop. A route only picks the first endpoint
// tried; a stale one costs the forward hop the call would have had
// without it, and its answer corrects it.
type routes struct {
	m sync.Map // partition key → *endpoint
	n atomic.Int64
}

func (r *routes) get(key string) *endpoint {
	if e, ok := r.m.Load(key); ok {
		return e.(*endpoint)
	}
	return nil
}

// learn records that e serves key (nil: nothing known).
func (r *routes) learn(key string, e *endpoint) {
	old, ok := r.m.Load(key)
	switch {
	case ok && old == e:
	case e == nil:
		if ok {
			r.m.Delete(key)
		}
	default:
		if !ok && r.n.Add(1) > maxRoutes {
			r.m.Clear()
			r.n.Store(1)
		}
		r.m.Store(strings.Clone(key), e)
	}
}

// servedBy is the endpoint an answer from e names as the one that served
// it: e itself when served there, the endpoint dialed as servedFrom when
// forwarded, or nil when the client has no endpoint of that URL (or the
// answer says nothing of who leads: MustRetry).
func (c *Client) servedBy(e *endpoint, res lease.Result) *endpoint {
	if res.Status == lease.MustRetry {
		return nil
	}
	if res.ServedFrom == "" || res.ServedFrom == e.url {
		return e
	}
	want := strings.TrimSuffix(res.ServedFrom, "/")
	for _, o := range c.endpoints {
		if strings.TrimSuffix(o.url, "/") == want {
			return o
		}
	}
	return nil
}
