package transport

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kahunago/kahuna/lease"
	v1 "github.com/kahunago/kahuna/transport/kahunav1pb"
)

// The Election service (kahuna.v1.Election): leader election on sessions,
// made of lock calls on the election's lock lease.ElectionPrefix + its
// name, held by the candidacy's owner (its session's ID, then its value),
// as the Go API's Campaign, Proclaim, Resign, Leader and Observe are.

// electionService implements kahuna.v1.Election on a Server.
type electionService struct {
	v1.UnimplementedElectionServer
	s *Server
}

// checkCandidacy says why a candidacy's election, session and value are
// not well formed, or "".
func checkCandidacy(election, session string, value []byte) string {
	if why := lease.CheckElection(election, value); why != "" {
		return why
	}
	return lease.CheckSessionID(session)
}

func (x *electionService) Campaign(ctx context.Context, req *v1.CampaignRequest) (*v1.CampaignResponse, error) {
	if why := checkCandidacy(req.GetElection(), req.GetSessionId(), req.GetValue()); why != "" {
		return &v1.CampaignResponse{Status: v1.Status_STATUS_INVALID_INPUT, Reason: why, ServedFrom: x.s.opts.NodeName}, nil
	}
	if st, why := x.s.sessionLive(ctx, req.GetSessionId()); why != "" {
		return &v1.CampaignResponse{Status: st, Reason: why, ServedFrom: x.s.opts.NodeName}, nil
	}
	resp, err := x.s.lock(ctx, x.s.locker, &v1.LockRequest{Resource: lease.ElectionPrefix + req.GetElection(),
		Owner: candidateOwner(req.GetSessionId(), req.GetValue()), TtlMs: req.GetTtlMs(), WaitMs: req.GetWaitMs(), Durability: req.GetDurability()})
	if err != nil {
		return nil, err
	}
	out := &v1.CampaignResponse{Status: resp.GetStatus(), WaitedMs: resp.GetWaitedMs(), Reason: resp.GetReason(), ServedFrom: resp.GetServedFrom()}
	if out.Status == v1.Status_STATUS_LOCKED {
		out.Epoch = resp.GetFencingToken()
	}
	return out, nil
}

func (x *electionService) Proclaim(ctx context.Context, req *v1.ProclaimRequest) (*v1.ElectionResponse, error) {
	why := checkCandidacy(req.GetElection(), req.GetSessionId(), req.GetValue())
	if why == "" {
		why = lease.CheckElection(req.GetElection(), req.GetNewValue())
	}
	if why != "" {
		return &v1.ElectionResponse{Status: v1.Status_STATUS_INVALID_INPUT, Reason: why, ServedFrom: x.s.opts.NodeName}, nil
	}
	return x.call(ctx, &v1.LockRequest{Op: v1.LockOp_LOCK_OP_EXTEND, Resource: lease.ElectionPrefix + req.GetElection(),
		Owner: candidateOwner(req.GetSessionId(), req.GetValue()), NewOwner: candidateOwner(req.GetSessionId(), req.GetNewValue()),
		TtlMs: req.GetTtlMs(), Durability: req.GetDurability()})
}

func (x *electionService) Resign(ctx context.Context, req *v1.ResignRequest) (*v1.ElectionResponse, error) {
	if why := checkCandidacy(req.GetElection(), req.GetSessionId(), req.GetValue()); why != "" {
		return &v1.ElectionResponse{Status: v1.Status_STATUS_INVALID_INPUT, Reason: why, ServedFrom: x.s.opts.NodeName}, nil
	}
	return x.call(ctx, &v1.LockRequest{Op: v1.LockOp_LOCK_OP_UNLOCK, Resource: lease.ElectionPrefix + req.GetElection(),
		Owner: candidateOwner(req.GetSessionId(), req.GetValue()), Durability: req.GetDurability()})
}

// sessionLive says whether session id's lease is live, read from its
// partition's leader: "" if it is, else the status to answer a campaign
// with and why. A campaign checks it first so that one on a closed or
// expired session is refused with nothing changed; a session that ends
// between the check and the grant leaves a candidacy that its next
// keep-alive reports with the session gone, and that frees itself at its
// lease's end.
func (s *Server) sessionLive(ctx context.Context, id string) (v1.Status, string) {
	info, res, _ := s.serve(ctx, s.locker, lease.Request{Op: lease.Get, Resource: lease.SessionPrefix + id})
	switch {
	case res.Status == lease.Got && string(info.Owner) == id:
		return 0, ""
	case res.Status == lease.Got || res.Status == lease.LockDoesNotExist:
		return v1.Status_STATUS_LOCK_DOES_NOT_EXIST, "session " + id + " is not live: closed, expired or never created"
	case res.Reason != "":
		return v1.Status(res.Status), "reading the session: " + res.Reason
	}
	return v1.Status(res.Status), "reading the session: " + res.Status.String()
}

// call makes one lock call and answers it as an ElectionResponse.
func (x *electionService) call(ctx context.Context, req *v1.LockRequest) (*v1.ElectionResponse, error) {
	resp, err := x.s.lock(ctx, x.s.locker, req)
	if err != nil {
		return nil, err
	}
	return &v1.ElectionResponse{Status: resp.GetStatus(), Reason: resp.GetReason(), ServedFrom: resp.GetServedFrom()}, nil
}

func (x *electionService) Leader(ctx context.Context, req *v1.LeaderRequest) (*v1.LeaderResponse, error) {
	if why := lease.CheckElection(req.GetElection(), nil); why != "" {
		return &v1.LeaderResponse{Status: v1.Status_STATUS_INVALID_INPUT, Reason: why, ServedFrom: x.s.opts.NodeName}, nil
	}
	info, res, _ := x.s.serve(ctx, x.s.locker, lease.Request{Op: lease.Get, Resource: lease.ElectionPrefix + req.GetElection()})
	out := &v1.LeaderResponse{Status: v1.Status(res.Status), Reason: res.Reason, ServedFrom: res.ServedFrom}
	if out.ServedFrom == "" {
		out.ServedFrom = x.s.opts.NodeName
	}
	if res.Status == lease.Got {
		out.Value, out.Epoch = ElectionValue(info.Owner), info.FencingToken
		out.ExpiresMs = expiresMs(info.Expires)
		if len(info.Owner) >= lease.CandidateIDBytes {
			out.SessionId = string(info.Owner[:lease.CandidateIDBytes])
		}
	}
	return out, nil
}

// Observe serves one Observe stream: the election lock's watch, folded
// into the election's changes (ElectionFold).
func (x *electionService) Observe(req *v1.ObserveRequest, stream grpc.ServerStreamingServer[v1.ElectionEvent]) error {
	w, ok := x.s.locker.(Watcher)
	if !ok {
		return status.Error(codes.Unimplemented, "this node does not offer watches")
	}
	if why := lease.CheckElection(req.GetElection(), nil); why != "" {
		return status.Error(codes.InvalidArgument, why)
	}
	ctx, cancel := x.s.untilDrain(stream.Context())
	defer cancel()
	var fold ElectionFold
	err := w.WatchLock(ctx, lease.ElectionPrefix+req.GetElection(), req.GetFromRevision(), func(ev WatchEvent) error {
		e, ok := fold.Next(ev)
		if !ok {
			return nil
		}
		servedFrom := ev.ServedFrom
		if servedFrom == "" {
			servedFrom = x.s.opts.NodeName
		}
		return stream.Send(&v1.ElectionEvent{Kind: v1.ElectionEventKind(e.Kind), Value: e.Value, Epoch: e.Epoch,
			Revision: e.Revision, ServedFrom: servedFrom})
	})
	switch {
	case stream.Context().Err() != nil:
		return status.FromContextError(stream.Context().Err()).Err()
	case ctx.Err() != nil: // draining
		return status.Error(codes.Unavailable, "node shutting down: observe again from the last revision")
	}
	return watchStatus(err)
}

// expiresMs is t in Unix milliseconds, 0 for the zero time.
func expiresMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}
