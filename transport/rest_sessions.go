package transport

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/kahunago/kahuna/lease"
	v1 "github.com/kahunago/kahuna/transport/kahunav1pb"
)

// REST forms of the Sessions and Election services: POST with a JSON
// body, answered 200 with a JSON reply whose type is the lock status (a
// number, as the lock routes answer), or 400 for a body that is not a
// request object. Names are the gRPC fields' in camelCase, bytes are
// base64 and durations whole milliseconds (ttlMs, waitMs).
const (
	SessionsPath  = "/v1/sessions/"  // create, keep-alive, close
	ElectionsPath = "/v1/elections/" // campaign, proclaim, resign, leader, observe
)

// DefaultObserveWait is how long a REST observe waits for an event when
// its request names no wait.
const DefaultObserveWait = 30 * time.Second

type candidacyJSON struct {
	Election string `json:"election"`
	Value    []byte `json:"value"`
}

type createSessionBody struct {
	TTLMs      int64 `json:"ttlMs"`
	Durability int32 `json:"durability"`
}

type createSessionReply struct {
	ServedFrom string       `json:"servedFrom,omitempty"`
	Type       lease.Status `json:"type"`
	ID         string       `json:"id,omitempty"`
	Reason     string       `json:"reason,omitempty"`
}

// sessionCallBody is a keep-alive's or a close's (which ignores ttlMs).
type sessionCallBody struct {
	ID          string          `json:"id"`
	TTLMs       int64           `json:"ttlMs"`
	Durability  int32           `json:"durability"`
	Locks       []string        `json:"locks"`
	Candidacies []candidacyJSON `json:"candidacies"`
}

type sessionCallReply struct {
	Type        lease.Status   `json:"type"`
	Locks       []lease.Status `json:"locks,omitempty"`
	Candidacies []lease.Status `json:"candidacies,omitempty"`
	Reason      string         `json:"reason,omitempty"`
}

type campaignBody struct {
	Election   string `json:"election"`
	Value      []byte `json:"value"`
	SessionID  string `json:"sessionId"`
	TTLMs      int64  `json:"ttlMs"`
	Durability int32  `json:"durability"`
	WaitMs     int64  `json:"waitMs"`
}

type campaignReply struct {
	ServedFrom string       `json:"servedFrom,omitempty"`
	Type       lease.Status `json:"type"`
	Epoch      int64        `json:"epoch"`
	WaitedMs   int64        `json:"waitedMs,omitempty"`
	Reason     string       `json:"reason,omitempty"`
}

// candidacyBody is a proclaim's or a resign's (which ignores newValue and
// ttlMs).
type candidacyBody struct {
	Election   string `json:"election"`
	SessionID  string `json:"sessionId"`
	Value      []byte `json:"value"`
	NewValue   []byte `json:"newValue"`
	TTLMs      int64  `json:"ttlMs"`
	Durability int32  `json:"durability"`
}

type electionReply struct {
	ServedFrom string       `json:"servedFrom,omitempty"`
	Type       lease.Status `json:"type"`
	Reason     string       `json:"reason,omitempty"`
}

type leaderBody struct {
	Election string `json:"election"`
}

type leaderReply struct {
	ServedFrom string       `json:"servedFrom,omitempty"`
	Type       lease.Status `json:"type"`
	Value      []byte       `json:"value,omitempty"`
	Epoch      int64        `json:"epoch"`
	ExpiresMs  int64        `json:"expiresMs,omitempty"`
	SessionID  string       `json:"sessionId,omitempty"`
	Reason     string       `json:"reason,omitempty"`
}

// electionEventJSON is one election event; kind is 1 elected, 2 vacant,
// 3 proclaimed.
type electionEventJSON struct {
	Kind     ElectionEventKind `json:"kind"`
	Value    []byte            `json:"value,omitempty"`
	Epoch    int64             `json:"epoch"`
	Revision uint64            `json:"revision"`
}

// observeBody asks for the election's events after last (the last event
// the client got; none: from its current state), waiting up to waitMs
// (0: DefaultObserveWait) for one.
type observeBody struct {
	Election string             `json:"election"`
	Last     *electionEventJSON `json:"last"`
	WaitMs   int64              `json:"waitMs"`
}

// observeReply carries the events that came (none when the wait ended
// first); type is Got, or MustRetry when the watch ended (observe again
// with the same last), InvalidInput or Busy (too many watchers).
type observeReply struct {
	ServedFrom string              `json:"servedFrom,omitempty"`
	Type       lease.Status        `json:"type"`
	Events     []electionEventJSON `json:"events"`
	Reason     string              `json:"reason,omitempty"`
}

// restSessions serves the REST routes of both services.
func (s *Server) restSessions(mux *http.ServeMux, guard func(http.Handler) http.Handler) {
	sess, elec := &sessionsService{s: s}, &electionService{s: s}
	route := func(path string, serve func(ctx context.Context, body []byte) (int, []byte)) {
		mux.Handle(path, guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, ok := s.readJSONBody(w, r)
			if !ok {
				return
			}
			code, reply := serve(r.Context(), body)
			writeReply(w, code, reply)
		})))
	}
	route(SessionsPath+"create", func(ctx context.Context, body []byte) (int, []byte) {
		var b createSessionBody
		if why := decodeBody(body, &b); why != "" {
			return badBody(nil, why)
		}
		resp, err := sess.Create(ctx, &v1.CreateSessionRequest{TtlMs: b.TTLMs, Durability: v1.Durability(b.Durability)})
		if err != nil {
			return goneReply()
		}
		return http.StatusOK, mustMarshal(createSessionReply{ServedFrom: resp.GetServedFrom(), Type: lease.Status(resp.GetStatus()), ID: resp.GetId(), Reason: resp.GetReason()})
	})
	route(SessionsPath+"keep-alive", func(ctx context.Context, body []byte) (int, []byte) {
		var b sessionCallBody
		if why := decodeBody(body, &b); why != "" {
			return badBody(nil, why)
		}
		resp, err := sess.keepAlive(ctx, &v1.KeepAliveRequest{Id: b.ID, TtlMs: b.TTLMs, Durability: v1.Durability(b.Durability),
			Locks: b.Locks, Candidacies: candidaciesPB(b.Candidacies)})
		if err != nil {
			return goneReply()
		}
		return http.StatusOK, mustMarshal(sessionCallReply{Type: lease.Status(resp.GetStatus()), Locks: statuses(resp.GetLocks()),
			Candidacies: statuses(resp.GetCandidacies()), Reason: resp.GetReason()})
	})
	route(SessionsPath+"close", func(ctx context.Context, body []byte) (int, []byte) {
		var b sessionCallBody
		if why := decodeBody(body, &b); why != "" {
			return badBody(nil, why)
		}
		resp, err := sess.Close(ctx, &v1.CloseSessionRequest{Id: b.ID, Durability: v1.Durability(b.Durability),
			Locks: b.Locks, Candidacies: candidaciesPB(b.Candidacies)})
		if err != nil {
			return goneReply()
		}
		return http.StatusOK, mustMarshal(sessionCallReply{Type: lease.Status(resp.GetStatus()), Locks: statuses(resp.GetLocks()),
			Candidacies: statuses(resp.GetCandidacies()), Reason: resp.GetReason()})
	})
	route(ElectionsPath+"campaign", func(ctx context.Context, body []byte) (int, []byte) {
		var b campaignBody
		if why := decodeBody(body, &b); why != "" {
			return badBody(nil, why)
		}
		resp, err := elec.Campaign(ctx, &v1.CampaignRequest{Election: b.Election, Value: b.Value, SessionId: b.SessionID,
			TtlMs: b.TTLMs, Durability: v1.Durability(b.Durability), WaitMs: b.WaitMs})
		if err != nil {
			return goneReply()
		}
		return http.StatusOK, mustMarshal(campaignReply{ServedFrom: resp.GetServedFrom(), Type: lease.Status(resp.GetStatus()),
			Epoch: resp.GetEpoch(), WaitedMs: resp.GetWaitedMs(), Reason: resp.GetReason()})
	})
	candidacy := func(call func(context.Context, candidacyBody) (*v1.ElectionResponse, error)) func(context.Context, []byte) (int, []byte) {
		return func(ctx context.Context, body []byte) (int, []byte) {
			var b candidacyBody
			if why := decodeBody(body, &b); why != "" {
				return badBody(nil, why)
			}
			resp, err := call(ctx, b)
			if err != nil {
				return goneReply()
			}
			return http.StatusOK, mustMarshal(electionReply{ServedFrom: resp.GetServedFrom(), Type: lease.Status(resp.GetStatus()), Reason: resp.GetReason()})
		}
	}
	route(ElectionsPath+"proclaim", candidacy(func(ctx context.Context, b candidacyBody) (*v1.ElectionResponse, error) {
		return elec.Proclaim(ctx, &v1.ProclaimRequest{Election: b.Election, SessionId: b.SessionID, Value: b.Value, NewValue: b.NewValue,
			TtlMs: b.TTLMs, Durability: v1.Durability(b.Durability)})
	}))
	route(ElectionsPath+"resign", candidacy(func(ctx context.Context, b candidacyBody) (*v1.ElectionResponse, error) {
		return elec.Resign(ctx, &v1.ResignRequest{Election: b.Election, SessionId: b.SessionID, Value: b.Value, Durability: v1.Durability(b.Durability)})
	}))
	route(ElectionsPath+"leader", func(ctx context.Context, body []byte) (int, []byte) {
		var b leaderBody
		if why := decodeBody(body, &b); why != "" {
			return badBody(nil, why)
		}
		resp, err := elec.Leader(ctx, &v1.LeaderRequest{Election: b.Election})
		if err != nil {
			return goneReply()
		}
		return http.StatusOK, mustMarshal(leaderReply{ServedFrom: resp.GetServedFrom(), Type: lease.Status(resp.GetStatus()), Value: resp.GetValue(),
			Epoch: resp.GetEpoch(), ExpiresMs: resp.GetExpiresMs(), SessionID: resp.GetSessionId(), Reason: resp.GetReason()})
	})
	route(ElectionsPath+"observe", func(ctx context.Context, body []byte) (int, []byte) {
		var b observeBody
		if why := decodeBody(body, &b); why != "" {
			return badBody(nil, why)
		}
		return http.StatusOK, mustMarshal(s.observeOnce(ctx, b))
	})
}

// observeOnce answers a REST observe: the election's events after b.Last,
// as soon as there is one, or none when the wait ends first.
func (s *Server) observeOnce(ctx context.Context, b observeBody) observeReply {
	reply := observeReply{ServedFrom: s.opts.NodeName, Type: lease.Got, Events: []electionEventJSON{}}
	w, ok := s.locker.(Watcher)
	wait := time.Duration(b.WaitMs) * time.Millisecond
	switch {
	case !ok:
		reply.Type, reply.Reason = lease.InvalidInput, "this node does not offer watches"
		return reply
	case b.WaitMs < 0 || b.WaitMs > lease.MaxWait.Milliseconds():
		reply.Type, reply.Reason = lease.InvalidInput, fmt.Sprintf("waitMs %d is out of range (0: %v, up to %d)", b.WaitMs, DefaultObserveWait, lease.MaxWait.Milliseconds())
		return reply
	case b.WaitMs == 0:
		wait = DefaultObserveWait
	}
	if why := lease.CheckElection(b.Election, nil); why != "" {
		reply.Type, reply.Reason = lease.InvalidInput, why
		return reply
	}
	var fold ElectionFold
	var from uint64
	if b.Last != nil {
		last := ElectionEvent(*b.Last)
		fold.last, from = &last, last.Revision
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	ctx, stopDrain := s.untilDrain(ctx)
	defer stopDrain()
	err := w.WatchLock(ctx, lease.ElectionPrefix+b.Election, from, func(ev WatchEvent) error {
		if ev.ServedFrom != "" {
			reply.ServedFrom = ev.ServedFrom
		}
		if e, ok := fold.Next(ev); ok {
			reply.Events = append(reply.Events, electionEventJSON(e))
			cancel() // one change is an answer
		}
		return nil
	})
	if we, ok := err.(*WatchError); ok && len(reply.Events) == 0 {
		reply.Type, reply.Reason = we.Status, we.Reason
	}
	return reply
}

// goneReply answers a call whose asker left before it was done: nobody
// reads it.
func goneReply() (int, []byte) {
	return http.StatusServiceUnavailable, mustMarshal(errorReply{Error: "request cancelled"})
}

func candidaciesPB(cs []candidacyJSON) []*v1.Candidacy {
	out := make([]*v1.Candidacy, len(cs))
	for i, c := range cs {
		out[i] = &v1.Candidacy{Election: c.Election, Value: c.Value}
	}
	return out
}

func statuses(ss []v1.Status) []lease.Status {
	out := make([]lease.Status, len(ss))
	for i, st := range ss {
		out[i] = lease.Status(st)
	}
	return out
}
