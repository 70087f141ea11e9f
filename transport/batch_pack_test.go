package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/kahunago/kahuna/lease"
	v1 "github.com/kahunago/kahuna/transport/kahunav1pb"
	pb "github.com/kahunago/kahuna/transport/lockspb"
)

// batchClient opens a kahuna.v1 Batch stream to addr with the generated
// code, as a client in another language would.
func batchClient(t *testing.T, addr string) (v1.Kahuna_BatchClient, metadata.MD) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	st, err := v1.NewKahunaClient(conn).Batch(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	md, err := st.Header()
	if err != nil {
		t.Fatal(err)
	}
	return st, md
}

func tryLockEnvelope(id int32, resource, owner string) *pb.GrpcBatchClientLockRequest {
	return &pb.GrpcBatchClientLockRequest{Type: pb.GrpcClientBatchType_TRY_LOCK, RequestId: id,
		Payload: &pb.GrpcBatchClientLockRequest_TryLock{TryLock: &pb.GrpcTryLockRequest{Resource: resource, Owner: []byte(owner), ExpiresMs: 60_000}}}
}

// recvAnswers reads answers until every id in want is answered, checking
// each one's status.
func recvAnswers(t *testing.T, st v1.Kahuna_BatchClient, want map[int32]pb.GrpcLockResponseType) (messages int) {
	t.Helper()
	for len(want) > 0 {
		resp, err := st.Recv()
		if err != nil {
			t.Fatalf("answers still due %v: %v", want, err)
		}
		messages++
		for _, a := range resp.GetResponses() {
			w, ok := want[a.GetRequestId()]
			if !ok {
				t.Fatalf("answer to %d: not asked or answered twice", a.GetRequestId())
			}
			var got pb.GrpcLockResponseType
			switch p := a.GetPayload().(type) {
			case *pb.GrpcBatchClientLockResponse_TryLock:
				got = p.TryLock.GetType()
			case *pb.GrpcBatchClientLockResponse_Unlock:
				got = p.Unlock.GetType()
			case *pb.GrpcBatchClientLockResponse_GetLock:
				got = p.GetLock.GetType()
			default:
				t.Fatalf("answer to %d: payload %T", a.GetRequestId(), p)
			}
			if got != w {
				t.Fatalf("answer to %d: %v, want %v", a.GetRequestId(), got, w)
			}
			delete(want, a.GetRequestId())
		}
	}
	return messages
}

// A Batch message carries many requests, each answered by RequestId; the
// stream's headers say it is served; a message over MaxBatchRequests ends
// the stream with a reason and applies none of its requests.
func TestBatchStreamCarriesManyRequestsAMessage(t *testing.T) {
	f := newWaitingFake()
	srv := startServer(t, f, ServerOptions{})
	st, md := batchClient(t, srv.native)
	if len(md.Get(batchHeader)) == 0 {
		t.Fatalf("Batch headers %v: no %s mark", md, batchHeader)
	}
	err := st.Send(&v1.BatchRequests{Requests: []*pb.GrpcBatchClientLockRequest{
		tryLockEnvelope(1, "a", "A"),
		tryLockEnvelope(2, "b", "B"),
		{Type: pb.GrpcClientBatchType_GET_LOCK, RequestId: 3, Payload: &pb.GrpcBatchClientLockRequest_GetLock{GetLock: &pb.GrpcGetLockRequest{Resource: "c"}}},
		{Type: pb.GrpcClientBatchType_TRY_LOCK, RequestId: 4, Payload: &pb.GrpcBatchClientLockRequest_TryLock{TryLock: &pb.GrpcTryLockRequest{Resource: "", Owner: []byte("A"), ExpiresMs: 1000}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	recvAnswers(t, st, map[int32]pb.GrpcLockResponseType{
		1: pb.GrpcLockResponseType_LOCK_RESPONSE_TYPE_LOCKED,
		2: pb.GrpcLockResponseType_LOCK_RESPONSE_TYPE_LOCKED,
		3: pb.GrpcLockResponseType_LOCK_RESPONSE_TYPE_LOCK_DOES_NOT_EXIST,
		4: pb.GrpcLockResponseType_LOCK_RESPONSE_TYPE_INVALID_INPUT,
	})
	if err := st.Send(&v1.BatchRequests{Requests: []*pb.GrpcBatchClientLockRequest{
		tryLockEnvelope(5, "a", "intruder"),
		{Type: pb.GrpcClientBatchType_UNLOCK, RequestId: 6, Payload: &pb.GrpcBatchClientLockRequest_Unlock{Unlock: &pb.GrpcUnlockRequest{Resource: "b", Owner: []byte("B")}}},
	}}); err != nil {
		t.Fatal(err)
	}
	recvAnswers(t, st, map[int32]pb.GrpcLockResponseType{
		5: pb.GrpcLockResponseType_LOCK_RESPONSE_TYPE_BUSY,
		6: pb.GrpcLockResponseType_LOCK_RESPONSE_TYPE_UNLOCKED,
	})

	// One request too many: nothing of the message is applied.
	over := &v1.BatchRequests{}
	for i := range MaxBatchRequests + 1 {
		over.Requests = append(over.Requests, tryLockEnvelope(int32(100+i), fmt.Sprintf("over/%d", i), "A"))
	}
	if err := st.Send(over); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); status.Code(err) == codes.OK || !strings.Contains(err.Error(), "more than 1024 requests") {
		t.Fatalf("a message over the limit: %v, want the stream ended saying why", err)
	}
	for i := range MaxBatchRequests + 1 {
		if _, r, _ := f.Get(testCtx(t), fmt.Sprintf("over/%d", i), lease.Ephemeral); r.Status != lease.LockDoesNotExist {
			t.Fatalf("over/%d of the refused message: %v", i, r.Status)
		}
	}
}

// The Go client speaks Batch to a kahuna that offers it, and many callers'
// requests share its messages; against Kahuna (no native service) and an
// older kahuna (native service without Batch) it speaks Kahuna's stream.
func TestClientBatchStreamAndItsFallback(t *testing.T) {
	for _, c := range []struct {
		name   string
		addr   string
		packed bool
	}{
		{"kahuna", startServer(t, newWaitingFake(), ServerOptions{}).native, true},
		{"Kahuna", startServer(t, newFake(), ServerOptions{}).native, false},
		{"older kahuna", startOlderKahuna(t, newWaitingFake()), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl := dial(t, []string{"http://" + c.addr}, WithStreamsPerEndpoint(1))
			var wg sync.WaitGroup
			errs := make(chan error, 64)
			for g := range 64 {
				wg.Go(func() {
					for i := range 20 {
						name, owner := fmt.Sprintf("g%d/%d", g, i), []byte(fmt.Sprint(g))
						if r, err := cl.TryLock(testCtx(t), name, owner, time.Minute, lease.Ephemeral); err != nil || r.Status != lease.Locked {
							errs <- fmt.Errorf("TryLock %s: %v %v", name, r.Status, err)
							return
						}
						if r, err := cl.Unlock(testCtx(t), name, owner, lease.Ephemeral); err != nil || r.Status != lease.Unlocked {
							errs <- fmt.Errorf("Unlock %s: %v %v", name, r.Status, err)
							return
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			bs := cl.endpoints[0].streams[0]
			bs.mu.Lock()
			packed := bs.cur != nil && bs.cur.packed
			bs.mu.Unlock()
			if packed != c.packed {
				t.Fatalf("stream packed %v, want %v", packed, c.packed)
			}
		})
	}
}

// ForwardBatch is node-to-node: the cluster secret opens it, a client
// token does not, and the client stream does not take the secret.
func TestForwardBatchNeedsThePeerSecret(t *testing.T) {
	clients, _ := NewTokens("client")
	peers, _ := NewTokens("secret")
	f := newWaitingFake()
	srv := startServer(t, f, ServerOptions{Tokens: clients, PeerTokens: peers})
	call := func(opts ...ClientOption) (*Client, error) {
		c := dial(t, []string{"http://" + srv.native}, opts...)
		_, err := c.TryLock(testCtx(t), "p", []byte("o"), time.Second, lease.Ephemeral)
		return c, err
	}
	if _, err := call(WithForwarding(), WithToken("client")); !errors.Is(err, lease.ErrUnauthenticated) {
		t.Errorf("ForwardBatch with a client token: %v, want ErrUnauthenticated", err)
	}
	if _, err := call(WithToken("secret")); !errors.Is(err, lease.ErrUnauthenticated) {
		t.Errorf("Batch with the peer secret: %v, want ErrUnauthenticated", err)
	}
	c, err := call(WithForwarding(), WithToken("secret"), WithStreamsPerEndpoint(1))
	if err != nil {
		t.Fatalf("ForwardBatch with the peer secret: %v", err)
	}
	if bs := c.endpoints[0].streams[0]; bs.method != packedServerMethod {
		t.Fatalf("forwarding client speaks %s, want ForwardBatch", bs.method.name)
	}
}

// A server shutting down answers every request of a Batch message that it
// is processing and ends the stream cleanly. (Requests of a message not
// yet handed to the Locker when the shutdown begins may be dropped
// unprocessed, as serveBatch says: both are held in the Locker here.)
func TestBatchShutdownAnswersWhatItReceived(t *testing.T) {
	f := newFake()
	held, other := newGate("held"), newGate("other")
	f.hook = func(ctx context.Context, op lease.Op, resource string) (lease.Status, error, bool) {
		if resource == other.resource {
			return other.hook(ctx, op, resource)
		}
		return held.hook(ctx, op, resource)
	}
	w := &waitingFake{fakeLocker: f}
	srv := startServer(t, w, ServerOptions{})
	st, _ := batchClient(t, srv.native)
	if err := st.Send(&v1.BatchRequests{Requests: []*pb.GrpcBatchClientLockRequest{tryLockEnvelope(1, "held", "A"), tryLockEnvelope(2, "other", "A")}}); err != nil {
		t.Fatal(err)
	}
	<-held.arrived
	<-other.arrived
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(testCtx(t)) }()
	<-srv.draining // shutdown has begun
	close(held.release)
	close(other.release)
	recvAnswers(t, st, map[int32]pb.GrpcLockResponseType{
		1: pb.GrpcLockResponseType_LOCK_RESPONSE_TYPE_LOCKED,
		2: pb.GrpcLockResponseType_LOCK_RESPONSE_TYPE_LOCKED,
	})
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the answers: %v, want a clean end", err)
	}
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
}

// TestWokenCallersAllRunCounted: every caller the reader wakes with its
// answer is counted as run once it runs, whether its call ended at once
// or its context ended as the answer came, so the writer, which waits for
// them when several are still to run, is never left waiting; the stream
// serves on.
func TestWokenCallersAllRunCounted(t *testing.T) {
	srv := startServer(t, newWaitingFake(), ServerOptions{})
	cl := dial(t, []string{"http://" + srv.native}, WithStreamsPerEndpoint(1))
	var wg sync.WaitGroup
	var answered, cut atomic.Int64
	for g := range 32 {
		wg.Go(func() {
			for i := range 200 {
				// Deadlines about as long as a call, so that some end
				// while their answer is on its way.
				ctx, cancel := context.WithTimeout(testCtx(t), time.Duration(rand.IntN(400))*time.Microsecond)
				name, owner := fmt.Sprintf("g%d/%d", g, i), []byte(fmt.Sprint(g))
				if _, err := cl.TryLock(ctx, name, owner, time.Minute, lease.Ephemeral); err != nil {
					cut.Add(1)
				} else {
					answered.Add(1)
				}
				cancel()
			}
		})
	}
	wg.Wait()
	if answered.Load() == 0 || cut.Load() == 0 {
		t.Fatalf("%d calls answered, %d cut short: the run needs both", answered.Load(), cut.Load())
	}
	bs := cl.endpoints[0].streams[0]
	if woken, ran := bs.woken.Load(), bs.ran.Load(); woken != ran || woken == 0 {
		t.Fatalf("the reader woke %d callers, %d counted as run", woken, ran)
	}
	for g := range 16 { // the writer still sends, for several callers at once
		wg.Go(func() {
			if r, err := cl.TryLock(testCtx(t), fmt.Sprintf("after/%d", g), []byte("A"), time.Minute, lease.Ephemeral); err != nil || r.Status != lease.Locked {
				t.Errorf("TryLock after: %v %v", r.Status, err)
			}
		})
	}
	wg.Wait()
}
