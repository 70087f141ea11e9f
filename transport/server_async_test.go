package transport

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kahunago/kahuna/lease"
)

// asyncFake is a waitingFake that also runs requests as the node runs its
// persistent ones (asyncLocker): started, and answered later from a
// goroutine of its own, as a committed write is. Requests for the gate's
// resource wait for its release; a resource "panic" panics in DoAsync;
// "decline" is left to the stream's workers; "now" is answered before
// DoAsync returns, as an idle lock actor answers on the caller's
// goroutine.
type asyncFake struct {
	*waitingFake
	gate    *gate
	started atomic.Int64
}

func (a *asyncFake) DoAsync(ctx context.Context, c lease.Checked, out Outcome) (Withdrawer, bool) {
	r := c.Request()
	switch r.Resource {
	case "decline":
		return nil, false
	case "panic":
		panic("asyncFake: asked to panic")
	case "now":
		a.started.Add(1)
		out.Outcome(a.decide(ctx, r.Op, r.Resource, r.Owner, r.TTL, r.Durability))
		return nil, true
	}
	a.started.Add(1)
	go func() {
		if a.gate != nil && r.Resource == a.gate.resource {
			a.gate.arrived <- struct{}{}
			<-a.gate.release
		}
		out.Outcome(a.decide(context.Background(), r.Op, r.Resource, r.Owner, r.TTL, r.Durability))
	}()
	return nil, true
}

// serveAsync serves an asyncFake and dials it with one stream, over
// kahuna's framing or gRPC.
func serveAsync(t *testing.T, framed bool) (*asyncFake, *testServer, *Client) {
	a := &asyncFake{waitingFake: newWaitingFake(), gate: newGate("parked")}
	srv := startServer(t, a, ServerOptions{})
	opts := []ClientOption{WithStreamsPerEndpoint(1)}
	if !framed {
		opts = append(opts, WithGRPCOnly())
	}
	return a, srv, dial(t, []string{"http://" + srv.native}, opts...)
}

// TestBatchAnswersComeFromTheLocker: on a Batch stream (gRPC and kahuna's
// framing) a persistent request goes to a Locker that answers it later
// (asyncLocker), and so does an ephemeral release alone in its message;
// an ephemeral TryLock goes to the stream's workers; a request the
// Locker declines goes to the workers too, one answered before DoAsync
// returns is answered all the same, and one whose start panics is
// answered Errored without ending the stream.
func TestBatchAnswersComeFromTheLocker(t *testing.T) {
	for _, framed := range []bool{false, true} {
		a, _, c := serveAsync(t, framed)
		ctx := testCtx(t)
		for _, tc := range []struct {
			resource string
			d        lease.Durability
			want     lease.Status
			started  int64 // DoAsync's starts after the call
		}{
			{"p", pers, lease.Locked, 1},
			{"p", pers, lease.Busy, 2}, // another owner below
			{"e", eph, lease.Locked, 2},
			{"decline", pers, lease.Locked, 2},
			{"panic", pers, lease.Errored, 2},
			{"p2", pers, lease.Locked, 3}, // the stream still serves
			{"now", pers, lease.Locked, 4},
		} {
			owner := []byte("A")
			if tc.want == lease.Busy {
				owner = []byte("B")
			}
			r, err := c.TryLock(ctx, tc.resource, owner, time.Minute, tc.d)
			if err != nil || r.Status != tc.want {
				t.Fatalf("framed=%v: TryLock %s %v = %+v, %v; want %v", framed, tc.resource, tc.d, r, err, tc.want)
			}
			if got := a.started.Load(); got != tc.started {
				t.Fatalf("framed=%v: after TryLock %s %v, %d started in the Locker, want %d", framed, tc.resource, tc.d, got, tc.started)
			}
		}
		if r, err := c.Unlock(ctx, "e", []byte("A"), eph); err != nil || r.Status != lease.Unlocked {
			t.Fatalf("framed=%v: Unlock e = %+v, %v; want Unlocked", framed, r, err)
		}
		if got := a.started.Load(); got != 5 {
			t.Fatalf("framed=%v: after an ephemeral Unlock, %d started in the Locker, want 5", framed, got)
		}
	}
}

// TestShutdownAnswersALaterAnswer: a request the Locker answers later
// (asyncLocker) is still answered when the server shuts down while it is
// in flight, and Shutdown ends cleanly after it.
func TestShutdownAnswersALaterAnswer(t *testing.T) {
	for _, framed := range []bool{false, true} {
		a, srv, c := serveAsync(t, framed)
		done := make(chan error, 1)
		var got atomic.Value
		go func() {
			r, err := c.TryLock(testCtx(t), "parked", []byte("A"), time.Minute, pers)
			got.Store(r)
			done <- err
		}()
		<-a.gate.arrived
		shut := make(chan error, 1)
		go func() { shut <- srv.Shutdown(testCtx(t)) }()
		<-srv.draining
		select {
		case err := <-shut:
			t.Fatalf("framed=%v: Shutdown returned (%v) with an answer still to come", framed, err)
		case <-time.After(100 * time.Millisecond):
		}
		close(a.gate.release)
		if err := <-done; err != nil {
			t.Fatalf("framed=%v: the call in flight = %v, want answered", framed, err)
		}
		if r := got.Load().(lease.Result); r.Status != lease.Locked {
			t.Fatalf("framed=%v: the call in flight = %+v, want Locked", framed, r)
		}
		if err := <-shut; err != nil {
			t.Fatalf("framed=%v: Shutdown = %v", framed, err)
		}
	}
}
