package transport

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kahunago/kahuna/lease"
	v1 "github.com/kahunago/kahuna/transport/kahunav1pb"
)

// checkedDoer is a Forwarded Locker that takes requests whole (as a
// node's does) and records them; its Locker methods fail the test.
type checkedDoer struct {
	t  *testing.T
	mu sync.Mutex
	// got is every request Do was handed.
	got []lease.Request
}

func (d *checkedDoer) Do(_ context.Context, c lease.Checked) (lease.LockInfo, lease.Result, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.got = append(d.got, c.Request())
	return lease.LockInfo{}, lease.Result{Status: lease.Locked, FencingToken: 3}, nil
}

func (d *checkedDoer) requests() []lease.Request {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]lease.Request(nil), d.got...)
}

func (d *checkedDoer) method(name string) {
	d.t.Errorf("the server called %s instead of Do", name)
}

func (d *checkedDoer) TryLock(context.Context, string, []byte, time.Duration, lease.Durability) (lease.Result, error) {
	d.method("TryLock")
	return lease.Result{}, nil
}

func (d *checkedDoer) Extend(context.Context, string, []byte, time.Duration, lease.Durability) (lease.Result, error) {
	d.method("Extend")
	return lease.Result{}, nil
}

func (d *checkedDoer) Unlock(context.Context, string, []byte, lease.Durability) (lease.Result, error) {
	d.method("Unlock")
	return lease.Result{}, nil
}

func (d *checkedDoer) Get(context.Context, string, lease.Durability) (lease.LockInfo, lease.Result, error) {
	d.method("Get")
	return lease.LockInfo{}, lease.Result{}, nil
}

func (d *checkedDoer) Lock(context.Context, string, []byte, time.Duration, time.Duration, lease.Durability) (lease.Result, error) {
	d.method("Lock")
	return lease.Result{}, nil
}

// TestForwardedHopIsChecked: a leader checks what a peer forwards (the
// peer may run another version) with the rule of every edge: a bad
// request on the forwarding stream or ForwardLock is InvalidInput, with
// its reason where the wire carries one, and reaches nothing; a good one
// is handed to the Locker whole, once, as the peer sent it.
func TestForwardedHopIsChecked(t *testing.T) {
	fwd := &checkedDoer{t: t}
	srv := startServer(t, newWaitingFake(), ServerOptions{Forwarded: fwd})

	raw := rawConn(t, srv.native)
	st := rawStream(t, raw, "/Locker/BatchServerLockRequests")
	for i, body := range [][]byte{
		wTryLock("", "A", 1000, 1),  // no resource
		wTryLock("r", "", 1000, 1),  // no owner
		wTryLock("r", "A", 0, 1),    // no ttl
		wTryLock("r", "A", -5, 1),   // negative ttl
		wTryLock("r", "A", 1000, 7), // unknown durability
	} {
		must(t, st.SendMsg(wEnvelope(1, i+1, 3, body)))
		if m := recvWire(t, st); m.varint(t, 2) != uint64(i+1) || m.sub(t, 3).varint(t, 2) != uint64(lease.InvalidInput) {
			t.Errorf("bad forwarded TryLock %d answered %v, want InvalidInput", i+1, m)
		}
	}

	conn, err := grpc.NewClient(srv.native, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	native := v1.NewKahunaClient(conn)
	for _, c := range []struct {
		req  *v1.LockRequest
		want string
	}{
		{&v1.LockRequest{Owner: []byte("A"), TtlMs: 1000, WaitMs: 10}, "resource is empty"},
		{&v1.LockRequest{Resource: "r", TtlMs: 1000, WaitMs: 10}, "owner is empty"},
		{&v1.LockRequest{Resource: "r", Owner: []byte("A"), WaitMs: 10}, "ttl 0s is not positive"},
		{&v1.LockRequest{Resource: "r", Owner: []byte("A"), TtlMs: 1000, WaitMs: -5}, "wait_ms -5 is out of range (-1: until the call's deadline, or 0 to 2147483647)"},
		{&v1.LockRequest{Resource: "r", Owner: []byte("A"), TtlMs: 1000, WaitMs: 10, Durability: 9}, "durability 9 is unknown (0 ephemeral, 1 persistent)"},
	} {
		resp, err := native.ForwardLock(testCtx(t), c.req)
		if err != nil || resp.GetStatus() != v1.Status(lease.InvalidInput) || resp.GetReason() != c.want {
			t.Errorf("ForwardLock %v = %v, %v; want InvalidInput: %s", c.req, resp, err, c.want)
		}
	}
	if got := fwd.requests(); len(got) != 0 {
		t.Fatalf("bad forwarded requests reached the Locker: %+v", got)
	}

	must(t, st.SendMsg(wEnvelope(1, 9, 3, wTryLock("r", "A", 1000, 1))))
	if m := recvWire(t, st); m.sub(t, 3).varint(t, 2) != uint64(lease.Locked) {
		t.Fatalf("good forwarded TryLock answered %v", m)
	}
	if resp, err := native.ForwardLock(testCtx(t), &v1.LockRequest{Resource: "w", Owner: []byte("B"), TtlMs: 2000, WaitMs: -1, Durability: 1}); err != nil || resp.GetStatus() != v1.Status(lease.Locked) {
		t.Fatalf("good ForwardLock = %v, %v", resp, err)
	}
	want := []lease.Request{
		{Op: lease.TryLock, Resource: "r", Owner: []byte("A"), TTL: time.Second, Durability: lease.Persistent},
		{Op: lease.TryLock, Resource: "w", Owner: []byte("B"), TTL: 2 * time.Second, Durability: lease.Persistent, Wait: lease.WaitForever},
	}
	got := fwd.requests()
	if len(got) != len(want) {
		t.Fatalf("the Locker was handed %+v, want %+v", got, want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Op != w.Op || g.Resource != w.Resource || string(g.Owner) != string(w.Owner) || g.TTL != w.TTL || g.Durability != w.Durability || g.Wait != w.Wait {
			t.Errorf("request %d handed over as %+v, want %+v", i, g, w)
		}
	}
}
