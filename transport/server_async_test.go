package transport

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kahunago/kahuna/lease"
	v1 "github.com/kahunago/kahuna/transport/kahunav1pb"
	pb "github.com/kahunago/kahuna/transport/lockspb"
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

var _ asyncLocker = (*asyncFake)(nil)

// DoNowEach: "here" and "here-parked" are the Locker's own ephemeral
// requests, as those of a partition the node leads are. "here" is
// answered at once; "here-parked" later, from a goroutine of its own, as
// a request that waits for its record's read, a write or a raise of the
// token window is (a test may hold its decision with a hook).
func (a *asyncFake) DoNowEach(ctx context.Context, cs []lease.Checked, answers []NowAnswer, later func(j int) Outcome) {
	for j, c := range cs {
		r := c.Request()
		answers[j] = NowAnswer{}
		switch r.Resource {
		case "here":
			_, res, err := a.decide(ctx, r.Op, r.Resource, r.Owner, r.TTL, r.Durability)
			if err != nil {
				res = lease.Result{Status: lease.Errored}
			}
			answers[j] = NowAnswer{Res: res, Now: true}
		case "here-parked":
			out := later(j)
			go func() { out.Outcome(a.decide(ctx, r.Op, r.Resource, r.Owner, r.TTL, r.Durability)) }()
			answers[j].Taken = true
		}
	}
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
// framing) every request goes to a Locker that can answer it later
// (asyncLocker), persistent or ephemeral, except an ephemeral one the
// Locker serves itself, which its DoNow decides at once; a request the
// Locker declines goes to the stream's workers, one answered before
// DoAsync returns is answered all the same, and one whose start panics is
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
			{"e", eph, lease.Locked, 3},
			{"decline", pers, lease.Locked, 3},
			{"decline", eph, lease.Locked, 3}, // declined ephemeral too: the workers
			{"panic", pers, lease.Errored, 3},
			{"p2", pers, lease.Locked, 4}, // the stream still serves
			{"now", pers, lease.Locked, 5},
			{"here", eph, lease.Locked, 5}, // DoNow, not DoAsync
			{"here", pers, lease.Locked, 6},
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
		if got := a.started.Load(); got != 7 {
			t.Fatalf("framed=%v: after an ephemeral Unlock, %d started in the Locker, want 7", framed, got)
		}
	}
}

// TestAWaitingRequestDoesNotHoldUpItsStream: a request the Locker decides
// itself but cannot answer at once (the node's waits for its record's
// read, a write or a raise of the token window) does not hold up the
// other requests of its stream: with a client's one stream, a request of
// another partition, an Extend of another lock say, is answered meanwhile.
func TestAWaitingRequestDoesNotHoldUpItsStream(t *testing.T) {
	for _, framed := range []bool{false, true} {
		a, _, c := serveAsync(t, framed)
		parked := newGate("here-parked")
		a.hook = parked.hook
		ctx := testCtx(t)
		done := make(chan error, 1)
		go func() {
			r, err := c.TryLock(ctx, "here-parked", []byte("A"), time.Minute, eph)
			if err == nil && r.Status != lease.Locked {
				err = fmt.Errorf("answered %+v, want Locked", r)
			}
			done <- err
		}()
		<-parked.arrived
		for _, res := range []string{"here", "e"} {
			answered := make(chan error, 1)
			go func() {
				_, err := c.TryLock(ctx, res, []byte("A"), time.Minute, eph)
				answered <- err
			}()
			select {
			case err := <-answered:
				if err != nil {
					t.Fatalf("framed=%v: TryLock %s = %v", framed, res, err)
				}
			case <-time.After(5 * time.Second):
				close(parked.release)
				t.Fatalf("framed=%v: TryLock %s not answered in 5 s while another request of its stream waits", framed, res)
			}
		}
		close(parked.release)
		if err := <-done; err != nil {
			t.Fatalf("framed=%v: the waiting request: %v", framed, err)
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

// TestAnswersOfBufferedMessagesShareAMessage: the answers a node has at
// once for the requests of one message, and of the framed messages read
// with it, leave together in one message. Each answer sent on its own
// was a socket write of its own.
func TestAnswersOfBufferedMessagesShareAMessage(t *testing.T) {
	// Persistent ones on "now" (DoAsync answers them before it returns),
	// ephemeral ones on "here" (DoNow decides them).
	now := func(id int32, owner string, d pb.GrpcLockDurability) *pb.GrpcBatchClientLockRequest {
		resource := "now"
		if d == pb.GrpcLockDurability_DURABILITY_EPHEMERAL {
			resource = "here"
		}
		return &pb.GrpcBatchClientLockRequest{Type: pb.GrpcClientBatchType_TRY_LOCK, RequestId: id,
			Payload: &pb.GrpcBatchClientLockRequest_TryLock{TryLock: &pb.GrpcTryLockRequest{Resource: resource, Owner: []byte(owner), ExpiresMs: 60_000, Durability: d}}}
	}
	messages := func(first int32) []*v1.BatchRequests {
		var ms []*v1.BatchRequests
		for m := range int32(2) {
			var rs []*pb.GrpcBatchClientLockRequest
			for i := range int32(3) {
				id := first + 3*m + i
				d := pb.GrpcLockDurability_DURABILITY_PERSISTENT
				if id%2 == 0 {
					d = pb.GrpcLockDurability_DURABILITY_EPHEMERAL
				}
				rs = append(rs, now(id, fmt.Sprintf("owner %d", id), d))
			}
			ms = append(ms, &v1.BatchRequests{Requests: rs})
		}
		return ms
	}
	ids := func(resp *v1.BatchResponses) (got []int32) {
		for _, a := range resp.GetResponses() {
			got = append(got, a.GetRequestId())
		}
		slices.Sort(got)
		return got
	}

	t.Run("framed, two messages in one write", func(t *testing.T) {
		a, srv, _ := serveAsync(t, true)
		conn, err := net.Dial("tcp", srv.native)
		must(t, err)
		defer conn.Close()
		must(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
		b := appendHello(nil, frameKindBatch, "")
		for _, m := range messages(1) {
			frame, err := appendFrame(nil, m, appendClientMsg)
			must(t, err)
			b = append(b, frame...)
		}
		_, err = conn.Write(b)
		must(t, err)
		r := bufio.NewReader(conn)
		if answer, err := r.ReadByte(); err != nil || answer != frameAccepted {
			t.Fatalf("hello answered %q, %v; want accepted", answer, err)
		}
		body, err := (&frameConn{conn: conn, r: r}).read(1 << 20)
		must(t, err)
		resp := new(v1.BatchResponses)
		must(t, unmarshalProto(body, resp))
		if got := ids(resp); !slices.Equal(got, []int32{1, 2, 3, 4, 5, 6}) {
			t.Fatalf("the first answer message answers %v, want all six requests of the two messages written together", got)
		}
		if n := a.started.Load(); n != 3 {
			t.Fatalf("%d requests started in the Locker, want the 3 persistent ones", n)
		}
	})
	t.Run("framed, a message and part of the next", func(t *testing.T) {
		_, srv, _ := serveAsync(t, true)
		conn, err := net.Dial("tcp", srv.native)
		must(t, err)
		defer conn.Close()
		ms := messages(1)
		first, err := appendFrame(nil, ms[0], appendClientMsg)
		must(t, err)
		second, err := appendFrame(nil, ms[1], appendClientMsg)
		must(t, err)
		_, err = conn.Write(append(append(appendHello(nil, frameKindBatch, ""), first...), second[:len(second)/2]...))
		must(t, err)
		r := bufio.NewReader(conn)
		must(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
		if answer, err := r.ReadByte(); err != nil || answer != frameAccepted {
			t.Fatalf("hello answered %q, %v; want accepted", answer, err)
		}
		// The rest of the second message is never sent: the first's
		// answers must not wait for it.
		body, err := (&frameConn{conn: conn, r: r}).read(1 << 20)
		if err != nil {
			t.Fatalf("the first message's answers, with the next message begun: %v", err)
		}
		resp := new(v1.BatchResponses)
		must(t, unmarshalProto(body, resp))
		if got := ids(resp); !slices.Equal(got, []int32{1, 2, 3}) {
			t.Fatalf("the first answer message answers %v, want the first message's three requests", got)
		}
	})
	t.Run("gRPC, one message", func(t *testing.T) {
		_, srv, _ := serveAsync(t, false)
		st, _ := batchClient(t, srv.native)
		must(t, st.Send(messages(1)[0]))
		resp, err := st.Recv()
		must(t, err)
		if got := ids(resp); !slices.Equal(got, []int32{1, 2, 3}) {
			t.Fatalf("the first answer message answers %v, want the message's three requests", got)
		}
	})
}

// A Batch message's ephemeral requests are decided together, but never
// past a request that goes another way: those before a persistent one
// are decided before it starts, and those that hold the stream's last
// free slots are decided before the reader waits for one. Here seven
// requests pass through two slots, and the Locker sees them in the
// message's order.
func TestBatchDecidesInOrderThroughFewSlots(t *testing.T) {
	a := &asyncFake{waitingFake: newWaitingFake()}
	var (
		mu   sync.Mutex
		seen []string
	)
	a.hook = func(_ context.Context, op lease.Op, resource string) (lease.Status, error, bool) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, op.String()+" "+resource)
		return 0, nil, false
	}
	srv := startServer(t, a, ServerOptions{MaxInFlightPerStream: 2})
	st, _ := batchClient(t, srv.native)
	// "here" is decided by DoNowEach, "now" (persistent) by DoAsync
	// before it returns.
	try := func(id int32, resource, owner string, d pb.GrpcLockDurability) *pb.GrpcBatchClientLockRequest {
		e := tryLockEnvelope(id, resource, owner)
		e.GetTryLock().Durability = d
		return e
	}
	eph, pers := pb.GrpcLockDurability_DURABILITY_EPHEMERAL, pb.GrpcLockDurability_DURABILITY_PERSISTENT
	if err := st.Send(&v1.BatchRequests{Requests: []*pb.GrpcBatchClientLockRequest{
		try(1, "here", "A", eph),
		try(2, "now", "B", pers),
		{Type: pb.GrpcClientBatchType_UNLOCK, RequestId: 3, Payload: &pb.GrpcBatchClientLockRequest_Unlock{Unlock: &pb.GrpcUnlockRequest{Resource: "here", Owner: []byte("A"), Durability: eph}}},
		try(4, "here", "C", eph),
		try(5, "here", "D", eph),
		try(6, "here", "E", eph),
		try(7, "here", "F", eph),
	}}); err != nil {
		t.Fatal(err)
	}
	recvAnswers(t, st, map[int32]pb.GrpcLockResponseType{
		1: pb.GrpcLockResponseType_LOCK_RESPONSE_TYPE_LOCKED,
		2: pb.GrpcLockResponseType_LOCK_RESPONSE_TYPE_LOCKED,
		3: pb.GrpcLockResponseType_LOCK_RESPONSE_TYPE_UNLOCKED,
		4: pb.GrpcLockResponseType_LOCK_RESPONSE_TYPE_LOCKED,
		5: pb.GrpcLockResponseType_LOCK_RESPONSE_TYPE_BUSY,
		6: pb.GrpcLockResponseType_LOCK_RESPONSE_TYPE_BUSY,
		7: pb.GrpcLockResponseType_LOCK_RESPONSE_TYPE_BUSY,
	})
	mu.Lock()
	defer mu.Unlock()
	want := []string{"TryLock here", "TryLock now", "Unlock here", "TryLock here", "TryLock here", "TryLock here", "TryLock here"}
	if !slices.Equal(seen, want) {
		t.Fatalf("decided in the order %q, want %q", seen, want)
	}
}
