package transport

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sync"

	"google.golang.org/grpc"

	"github.com/kahunago/kahuna/lease"
	v1 "github.com/kahunago/kahuna/transport/kahunav1pb"
)

// The Sessions service (kahuna.v1.Sessions): a session's lease and its
// locks and candidacies renewed and released by name, for clients in
// other languages. Each call is made of lock calls (the same checks,
// forwarding and answers as the Kahuna service's Lock): a session is the
// lock lease.SessionPrefix + its ID, held by the ID; its locks are held
// by the ID and its candidacies by the ID followed by their values. The
// server keeps no list of a session's locks, so a renewal answers each
// name it is given, and a lock the session lost shows as lost there.

// MaxKeepAlivesPerStream bounds the KeepAlive messages one stream has in
// flight on the server; one over it is answered Busy at once.
const MaxKeepAlivesPerStream = 1024

// sessionsService implements kahuna.v1.Sessions on a Server.
type sessionsService struct {
	v1.UnimplementedSessionsServer
	s *Server
}

// newSessionID is a fresh session ID: 32 lowercase hex characters.
func newSessionID() string {
	var b [lease.CandidateIDBytes / 2]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

func (x *sessionsService) Create(ctx context.Context, req *v1.CreateSessionRequest) (*v1.CreateSessionResponse, error) {
	id := newSessionID()
	resp, err := x.s.lock(ctx, x.s.locker, &v1.LockRequest{Resource: lease.SessionPrefix + id, Owner: []byte(id),
		TtlMs: req.GetTtlMs(), Durability: req.GetDurability()})
	if err != nil {
		return nil, err
	}
	out := &v1.CreateSessionResponse{Status: resp.GetStatus(), Reason: resp.GetReason(), ServedFrom: resp.GetServedFrom()}
	if out.Status == v1.Status_STATUS_LOCKED {
		out.Id = id
	}
	return out, nil
}

func (x *sessionsService) Close(ctx context.Context, req *v1.CloseSessionRequest) (*v1.CloseSessionResponse, error) {
	if why := checkSessionCall(req.GetId(), req.GetLocks(), req.GetCandidacies()); why != "" {
		return &v1.CloseSessionResponse{Status: v1.Status_STATUS_INVALID_INPUT, Reason: why}, nil
	}
	// Candidacies first, then the session's lease and its locks in one
	// batch, each name released on its own: the order only shows to a
	// reader between the two steps.
	cands, err := x.s.candidacies(ctx, v1.LockOp_LOCK_OP_UNLOCK, req.GetId(), 0, req.GetDurability(), req.GetCandidacies())
	if err != nil {
		return nil, err
	}
	st, locks, reason, err := x.s.sessionBatch(ctx, v1.LockOp_LOCK_OP_UNLOCK, req.GetId(), 0, req.GetDurability(), req.GetLocks())
	if err != nil {
		return nil, err
	}
	return &v1.CloseSessionResponse{Status: st, Locks: locks, Candidacies: cands, Reason: reason}, nil
}

// KeepAlive serves one KeepAlive stream: every message runs on a
// goroutine of its own and is answered when done, so a slow partition
// holds up no other session. At shutdown the messages received are
// answered (their calls do not wait, so they end by themselves) and the
// stream ends with OK.
func (x *sessionsService) KeepAlive(stream grpc.BidiStreamingServer[v1.KeepAliveRequest, v1.KeepAliveResponse]) error {
	ctx := stream.Context()
	draining, cancel := x.s.untilDrain(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		stopping bool
		inflight int
		sendMu   sync.Mutex // grpc allows one Send at a time
		wg       sync.WaitGroup
	)
	send := func(resp *v1.KeepAliveResponse) {
		sendMu.Lock()
		defer sendMu.Unlock()
		_ = stream.Send(resp) // a broken stream: Recv reports it
	}
	recvErr := make(chan error, 1)
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			mu.Lock()
			switch {
			case stopping: // received after shutdown began: not processed
			case inflight >= MaxKeepAlivesPerStream:
				wg.Add(1)
				go func() {
					defer wg.Done()
					send(&v1.KeepAliveResponse{RequestId: m.GetRequestId(), Status: v1.Status_STATUS_BUSY,
						Reason: fmt.Sprintf("this stream has %d keep-alives in flight, the most it serves at once", MaxKeepAlivesPerStream)})
				}()
			default:
				inflight++
				wg.Add(1)
				go func() {
					defer wg.Done()
					resp, err := x.keepAlive(ctx, m)
					mu.Lock()
					inflight--
					mu.Unlock()
					if err == nil {
						send(resp)
					}
				}()
			}
			mu.Unlock()
		}
	}()
	var err error
	select {
	case err = <-recvErr:
	case <-draining.Done(): // shutdown, or the stream ended
	}
	mu.Lock()
	stopping = true
	mu.Unlock()
	wg.Wait() // grpc forbids Send after the handler returns
	if err == nil || errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// keepAlive renews one session's lease, locks and candidacies.
func (x *sessionsService) keepAlive(ctx context.Context, m *v1.KeepAliveRequest) (*v1.KeepAliveResponse, error) {
	resp := &v1.KeepAliveResponse{RequestId: m.GetRequestId()}
	if why := checkSessionCall(m.GetId(), m.GetLocks(), m.GetCandidacies()); why != "" {
		resp.Status, resp.Reason = v1.Status_STATUS_INVALID_INPUT, why
		return resp, nil
	}
	var (
		wg       sync.WaitGroup
		candErr  error
		lockErr  error
		lockWhy  string
		sessions v1.Status
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		resp.Candidacies, candErr = x.s.candidacies(ctx, v1.LockOp_LOCK_OP_EXTEND, m.GetId(), m.GetTtlMs(), m.GetDurability(), m.GetCandidacies())
	}()
	sessions, resp.Locks, lockWhy, lockErr = x.s.sessionBatch(ctx, v1.LockOp_LOCK_OP_EXTEND, m.GetId(), m.GetTtlMs(), m.GetDurability(), m.GetLocks())
	wg.Wait()
	if err := errors.Join(candErr, lockErr); err != nil {
		return nil, err
	}
	resp.Status, resp.Reason = sessions, lockWhy
	return resp, nil
}

// checkSessionCall says why a KeepAlive or Close is not well formed
// before any lock call is made: the session's ID, and each candidacy's
// election name and value. The locks are checked as a batch's names.
func checkSessionCall(id string, locks []string, cands []*v1.Candidacy) string {
	if why := lease.CheckSessionID(id); why != "" {
		return why
	}
	if len(locks)+1 > lease.MaxGroupNames {
		return fmt.Sprintf("%d locks, over the limit of %d for one message (the session's lease makes %d names): send the rest in another",
			len(locks), lease.MaxGroupNames-1, lease.MaxGroupNames)
	}
	if len(cands) > lease.MaxGroupNames {
		return fmt.Sprintf("%d candidacies, over the limit of %d for one message: send the rest in another", len(cands), lease.MaxGroupNames)
	}
	for i, c := range cands {
		if why := lease.CheckElection(c.GetElection(), c.GetValue()); why != "" {
			return fmt.Sprintf("candidacy %d: %s", i+1, why)
		}
	}
	return ""
}

// sessionBatch extends (or releases) the session's own lease and locks,
// as one batch: the session's status, and each lock's. A batch the server
// refuses as a whole (a name not well formed, a semaphore among the
// locks) is InvalidInput with the reason, which numbers the names from 1,
// the session's lease, then locks in order.
func (s *Server) sessionBatch(ctx context.Context, op v1.LockOp, id string, ttlMs int64, d v1.Durability, locks []string) (v1.Status, []v1.Status, string, error) {
	req := &v1.LockRequest{Op: op, Resource: lease.SessionPrefix + id, Owner: []byte(id), TtlMs: ttlMs, Durability: d}
	if len(locks) > 0 {
		req.Also = locks
	}
	resp, err := s.lock(ctx, s.locker, req)
	if err != nil {
		return 0, nil, "", err
	}
	each := resp.GetEach()
	if len(each) != len(locks)+1 { // answered as a whole: a refusal, or a session alone
		each = make([]v1.Status, len(locks)+1)
		for i := range each {
			each[i] = resp.GetStatus()
		}
	}
	return each[0], each[1:], resp.GetReason(), nil
}

// candidacies extends (or releases) a session's candidacies, each on its
// own and all at once: each one's status, in order.
func (s *Server) candidacies(ctx context.Context, op v1.LockOp, id string, ttlMs int64, d v1.Durability, cands []*v1.Candidacy) ([]v1.Status, error) {
	if len(cands) == 0 {
		return nil, nil
	}
	out := make([]v1.Status, len(cands))
	errs := make([]error, len(cands))
	var wg sync.WaitGroup
	for i, c := range cands {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := s.lock(ctx, s.locker, &v1.LockRequest{Op: op, Resource: lease.ElectionPrefix + c.GetElection(),
				Owner: candidateOwner(id, c.GetValue()), TtlMs: ttlMs, Durability: d})
			out[i], errs[i] = resp.GetStatus(), err
		}()
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// candidateOwner is the owner of a session's candidacy: the session's ID,
// then the value.
func candidateOwner(id string, value []byte) []byte {
	return append([]byte(id), value...)
}
