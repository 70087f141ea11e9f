package actors

import (
	"sync"

	"github.com/asynkron/protoactor-go/actor"
)

// throughput is how many messages a mailbox run handles before it yields
// (protoactor's default).
const throughput = 300

// dispatcher runs the lock actors' mailboxes on reusable goroutines.
// protoactor's default dispatcher starts a goroutine whenever an idle
// mailbox receives a message; on a busy node that is a new goroutine per
// request, and every one of them grows its stack again on its way down to
// the lock decision (a profile of a node under load showed about a tenth of
// its CPU copying stacks). Here a run goes to the most recently idled
// worker when there is one, else to a new worker, which then stays for
// later runs until the ring closes. A mailbox has at most one run scheduled
// at a time, so there are about as many workers as actors ever busy at
// once.
type dispatcher struct {
	mu     sync.Mutex
	idle   []*runner // a stack: the warmest worker is reused first
	closed bool
}

// runner is one worker goroutine; it waits on its own channel, so handing
// it a run costs one send, without a select over shared channels.
type runner struct {
	next chan func() // capacity 1; nil means exit
}

var _ actor.Dispatcher = (*dispatcher)(nil)

// Schedule implements actor.Dispatcher. Like the default dispatcher it
// never blocks and never runs fn on the caller's goroutine.
func (d *dispatcher) Schedule(fn func()) {
	d.mu.Lock()
	if n := len(d.idle); n > 0 {
		r := d.idle[n-1]
		d.idle[n-1] = nil
		d.idle = d.idle[:n-1]
		d.mu.Unlock()
		r.next <- fn
		return
	}
	d.mu.Unlock()
	go d.work(&runner{next: make(chan func(), 1)}, fn)
}

// Throughput implements actor.Dispatcher.
func (d *dispatcher) Throughput() int { return throughput }

func (d *dispatcher) work(r *runner, fn func()) {
	for fn != nil {
		fn()
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			return
		}
		d.idle = append(d.idle, r)
		d.mu.Unlock()
		fn = <-r.next
	}
}

// close ends the idle workers; a run scheduled afterwards still runs, on a
// goroutine of its own.
func (d *dispatcher) close() {
	d.mu.Lock()
	d.closed = true
	idle := d.idle
	d.idle = nil
	d.mu.Unlock()
	for _, r := range idle {
		r.next <- nil
	}
}
