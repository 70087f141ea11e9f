package kahuna_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/internal/testcluster"
	v1 "github.com/kahunago/kahuna/transport/kahunav1pb"
)

// wireServices are the Sessions, Election and Kahuna services of one
// member, over gRPC.
type wireServices struct {
	sessions v1.SessionsClient
	election v1.ElectionClient
	kahuna   v1.KahunaClient
}

// dialServices dials endpoint's services with a client that asks a call
// again while it is answered MustRetry, as Kahuna's clients do. (Close,
// whose names are each released on their own, is asked again name by
// name: closeSession.)
func dialServices(t *testing.T, endpoint string) wireServices {
	t.Helper()
	conn, err := grpc.NewClient(strings.TrimPrefix(endpoint, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			for deadline := time.Now().Add(mustRetryFor); ; time.Sleep(5 * time.Millisecond) {
				err := invoke(ctx, method, req, reply, cc, opts...)
				r, ok := reply.(interface{ GetStatus() v1.Status })
				if err != nil || method == v1.Sessions_Close_FullMethodName || !ok || r.GetStatus() != v1.Status_STATUS_MUST_RETRY || time.Now().After(deadline) {
					return err
				}
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return wireServices{v1.NewSessionsClient(conn), v1.NewElectionClient(conn), v1.NewKahunaClient(conn)}
}

// mustRetryFor is how long the tests' clients ask again a call answered
// MustRetry. MustRetry applies nothing: a partition between leaders, or,
// on a machine so loaded that the whole process stalls for longer than a
// leader lease (about 70 ms at the default 10 ms Raft tick), every
// partition's leader until it renews its lease.
const mustRetryFor = 20 * time.Second

// keepAlive sends req on ka and returns its answer, sending it again
// while it is MustRetry for the session or any of its names (a renewal
// may be made twice).
func keepAlive(ka grpc.BidiStreamingClient[v1.KeepAliveRequest, v1.KeepAliveResponse], req *v1.KeepAliveRequest) (*v1.KeepAliveResponse, error) {
	const mr = v1.Status_STATUS_MUST_RETRY
	for deadline := time.Now().Add(mustRetryFor); ; time.Sleep(5 * time.Millisecond) {
		if err := ka.Send(req); err != nil {
			return nil, err
		}
		got, err := ka.Recv()
		if err != nil || got.GetStatus() != mr && !slices.Contains(got.GetLocks(), mr) && !slices.Contains(got.GetCandidacies(), mr) || time.Now().After(deadline) {
			return got, err
		}
	}
}

// closeSession closes a session as a client does: Close releases each
// name on its own, so a name answered MustRetry (nothing applied to it) is
// closed again with the names still MustRetry, and every other name keeps
// its first answer. (Asked again, the session's own lease answers as
// closed already.)
func closeSession(ctx context.Context, s v1.SessionsClient, req *v1.CloseSessionRequest) (*v1.CloseSessionResponse, error) {
	const mr = v1.Status_STATUS_MUST_RETRY
	out := &v1.CloseSessionResponse{Status: mr,
		Locks: slices.Repeat([]v1.Status{mr}, len(req.GetLocks())), Candidacies: slices.Repeat([]v1.Status{mr}, len(req.GetCandidacies()))}
	for deadline := time.Now().Add(mustRetryFor); ; time.Sleep(5 * time.Millisecond) {
		again := &v1.CloseSessionRequest{Id: req.GetId(), Durability: req.GetDurability()}
		var lockAt, candAt []int
		for i, st := range out.Locks {
			if st == mr {
				again.Locks, lockAt = append(again.Locks, req.GetLocks()[i]), append(lockAt, i)
			}
		}
		for i, st := range out.Candidacies {
			if st == mr {
				again.Candidacies, candAt = append(again.Candidacies, req.GetCandidacies()[i]), append(candAt, i)
			}
		}
		r, err := s.Close(ctx, again)
		if err != nil || len(r.GetLocks()) != len(lockAt) || len(r.GetCandidacies()) != len(candAt) {
			return r, err // not an answer to merge: as it is
		}
		if out.Status == mr {
			out.Status, out.Reason = r.GetStatus(), r.GetReason()
		}
		for j, i := range lockAt {
			out.Locks[i] = r.GetLocks()[j]
		}
		for j, i := range candAt {
			out.Candidacies[i] = r.GetCandidacies()[j]
		}
		if out.Status != mr && !slices.Contains(out.Locks, mr) && !slices.Contains(out.Candidacies, mr) || time.Now().After(deadline) {
			return out, nil
		}
	}
}

// expiresOf is when the lock resource's live lease ends, read from the
// partition's leader (zero if it is not held by owner). The cluster's
// balancer may be moving the partition: a leader between reigns answers
// MustRetry, and the read is made again, at the leader of the moment.
func expiresOf(t *testing.T, c *testcluster.Cluster, resource, owner string) time.Time {
	t.Helper()
	p := c.Node(1).Partition(resource)
	for deadline := time.Now().Add(10 * time.Second); ; {
		info, r, err := c.Node(c.Leader(p)).Get(context.Background(), resource, kahuna.Persistent)
		switch {
		case err == nil && r.Status == kahuna.Got && string(info.Owner) == owner:
			return info.Expires
		case err == nil && r.Status != kahuna.MustRetry, time.Now().After(deadline):
			return time.Time{}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSessionsAndElectionServices: a client in another language, through
// a member that leads none of the names (every call is forwarded), creates
// a session, takes two locks and a candidacy in it, renews them all with
// one KeepAlive message (a name it does not hold is answered as not held),
// proclaims, reads the leader, observes the election, and closes the
// session, which frees everything; for both durabilities.
func TestSessionsAndElectionServices(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 4, steadyLeaders)
	ctx := context.Background()
	for _, d := range []v1.Durability{v1.Durability_DURABILITY_PERSISTENT, v1.Durability_DURABILITY_EPHEMERAL} {
		t.Run(d.String(), func(t *testing.T) {
			prefix := strings.ToLower(d.String())
			election := prefix + "-ledger"
			_, follower := leaderAndFollower(c, kahuna.ElectionPrefix+election)
			locks := namesNotLedBy(c, follower, prefix, 2)
			w := dialServices(t, c.Member(follower).Endpoint)

			created, err := w.sessions.Create(ctx, &v1.CreateSessionRequest{TtlMs: 2000, Durability: d})
			if err != nil || created.GetStatus() != v1.Status_STATUS_LOCKED || len(created.GetId()) != 32 {
				t.Fatalf("Create: %v %v", created, err)
			}
			id := created.GetId()
			for _, name := range locks {
				r, err := w.kahuna.Lock(ctx, &v1.LockRequest{Resource: name, Owner: []byte(id), TtlMs: 2000, Durability: d})
				if err != nil || r.GetStatus() != v1.Status_STATUS_LOCKED {
					t.Fatalf("Lock %s in the session: %v %v", name, r, err)
				}
			}
			camp, err := w.election.Campaign(ctx, &v1.CampaignRequest{Election: election, Value: []byte("host-1"), SessionId: id, TtlMs: 2000, Durability: d})
			if err != nil || camp.GetStatus() != v1.Status_STATUS_LOCKED {
				t.Fatalf("Campaign: %v %v", camp, err)
			}
			epoch := camp.GetEpoch()

			// A rival session waits; its campaign is answered Busy at once
			// with no wait.
			rival, err := w.sessions.Create(ctx, &v1.CreateSessionRequest{TtlMs: 2000, Durability: d})
			if err != nil {
				t.Fatal(err)
			}
			if r, err := w.election.Campaign(ctx, &v1.CampaignRequest{Election: election, Value: []byte("host-2"), SessionId: rival.GetId(), TtlMs: 2000, Durability: d}); err != nil || r.GetStatus() != v1.Status_STATUS_BUSY {
				t.Fatalf("a rival's campaign while led: %v %v, want Busy", r, err)
			}
			observed := observe(t, w.election, election)
			if ev := <-observed; ev.GetKind() != v1.ElectionEventKind_ELECTION_EVENT_KIND_ELECTED || string(ev.GetValue()) != "host-1" || ev.GetEpoch() != epoch {
				t.Fatalf("first observed event: %v, want elected host-1 epoch %d", ev, epoch)
			}

			// One message renews the session, its locks and its candidacy,
			// here to a TTL ten times the first, so the renewal shows in
			// each lease's end.
			ka, err := w.sessions.KeepAlive(ctx)
			if err != nil {
				t.Fatal(err)
			}
			before := time.Now()
			got, err := keepAlive(ka, &v1.KeepAliveRequest{RequestId: 7, Id: id, TtlMs: 20000, Durability: d,
				Locks:       append(locks, prefix+"/not-held"),
				Candidacies: []*v1.Candidacy{{Election: election, Value: []byte("host-1")}}})
			if err != nil {
				t.Fatal(err)
			}
			ext, gone := v1.Status_STATUS_EXTENDED, v1.Status_STATUS_LOCK_DOES_NOT_EXIST
			if got.GetRequestId() != 7 || got.GetStatus() != ext || !equalStatuses(got.GetLocks(), ext, ext, gone) || !equalStatuses(got.GetCandidacies(), ext) {
				t.Fatalf("KeepAlive: %v, want request 7, the session, two locks and the candidacy extended and the third name not held", got)
			}
			for _, name := range append(locks, kahuna.SessionPrefix+id) {
				if end := expiresOf(t, c, name, id); end.Before(before.Add(15 * time.Second)) {
					t.Fatalf("%s's lease ends at %v after the KeepAlive, want 20 s after %v", name, end, before)
				}
			}
			if end := expiresOf(t, c, kahuna.ElectionPrefix+election, id+"host-1"); end.Before(before.Add(15 * time.Second)) {
				t.Fatalf("the candidacy's lease ends at %v after the KeepAlive, want 20 s after %v", end, before)
			}

			// Proclaim, then read the leader.
			if r, err := w.election.Proclaim(ctx, &v1.ProclaimRequest{Election: election, SessionId: id, Value: []byte("host-1"), NewValue: []byte("host-1b"), TtlMs: 20000, Durability: d}); err != nil || r.GetStatus() != ext {
				t.Fatalf("Proclaim: %v %v", r, err)
			}
			if r, err := w.election.Proclaim(ctx, &v1.ProclaimRequest{Election: election, SessionId: id, Value: []byte("stale"), NewValue: []byte("x"), TtlMs: 20000, Durability: d}); err != nil || r.GetStatus() != v1.Status_STATUS_INVALID_OWNER {
				t.Fatalf("Proclaim from a value the leader does not hold: %v %v, want InvalidOwner", r, err)
			}
			leader, err := w.election.Leader(ctx, &v1.LeaderRequest{Election: election})
			if err != nil || leader.GetStatus() != v1.Status_STATUS_GOT || string(leader.GetValue()) != "host-1b" || leader.GetEpoch() != epoch || leader.GetSessionId() != id {
				t.Fatalf("Leader: %v %v, want host-1b epoch %d of session %s", leader, err, epoch, id)
			}
			if ev := <-observed; ev.GetKind() != v1.ElectionEventKind_ELECTION_EVENT_KIND_PROCLAIMED || string(ev.GetValue()) != "host-1b" || ev.GetEpoch() != epoch {
				t.Fatalf("observed after the proclaim: %v", ev)
			}

			// The rival waits in the queue; closing the session resigns
			// the leader and elects the rival with a higher epoch.
			won := make(chan *v1.CampaignResponse, 1)
			go func() {
				r, err := w.election.Campaign(ctx, &v1.CampaignRequest{Election: election, Value: []byte("host-2"), SessionId: rival.GetId(), TtlMs: 20000, Durability: d, WaitMs: 30000})
				if err != nil {
					r = &v1.CampaignResponse{Status: v1.Status_STATUS_ERRORED, Reason: err.Error()}
				}
				won <- r
			}()
			closed, err := closeSession(ctx, w.sessions, &v1.CloseSessionRequest{Id: id, Durability: d, Locks: locks,
				Candidacies: []*v1.Candidacy{{Election: election, Value: []byte("host-1b")}}})
			un := v1.Status_STATUS_UNLOCKED
			if err != nil || closed.GetStatus() != un || !equalStatuses(closed.GetLocks(), un, un) || !equalStatuses(closed.GetCandidacies(), un) {
				t.Fatalf("Close: %v %v", closed, err)
			}
			for _, name := range append(locks, kahuna.SessionPrefix+id) {
				if end := expiresOf(t, c, name, id); !end.IsZero() {
					t.Fatalf("%s is still held by the session after Close", name)
				}
			}
			if r := <-won; r.GetStatus() != v1.Status_STATUS_LOCKED || r.GetEpoch() <= epoch {
				t.Fatalf("the rival's campaign after the close: %v, want elected with an epoch above %d", r, epoch)
			}
			// The leadership is gone: observed as such, and KeepAlive says
			// the session is.
			for ev := range observed {
				if ev.GetKind() == v1.ElectionEventKind_ELECTION_EVENT_KIND_ELECTED {
					if string(ev.GetValue()) != "host-2" || ev.GetEpoch() <= epoch {
						t.Fatalf("observed after the close: %v", ev)
					}
					break
				}
			}
			if got, err := keepAlive(ka, &v1.KeepAliveRequest{RequestId: 8, Id: id, TtlMs: 2000, Durability: d}); err != nil || got.GetStatus() != gone {
				t.Fatalf("KeepAlive of a closed session: %v %v, want LockDoesNotExist", got, err)
			}
			if r, err := w.election.Resign(ctx, &v1.ResignRequest{Election: election, SessionId: id, Value: []byte("host-1b"), Durability: d}); err != nil || r.GetStatus() == un {
				t.Fatalf("Resign of a leadership already lost: %v %v, want it to say it was not held", r, err)
			}
			if r, err := w.election.Resign(ctx, &v1.ResignRequest{Election: election, SessionId: rival.GetId(), Value: []byte("host-2"), Durability: d}); err != nil || r.GetStatus() != un {
				t.Fatalf("the rival's Resign: %v %v", r, err)
			}
			if r, err := w.election.Leader(ctx, &v1.LeaderRequest{Election: election}); err != nil || r.GetStatus() != gone {
				t.Fatalf("Leader with none: %v %v, want LockDoesNotExist", r, err)
			}
		})
	}
}

// namesNotLedBy are k lock names of distinct partition keys, starting
// with prefix, whose partitions member id does not lead.
func namesNotLedBy(c *testcluster.Cluster, id uint64, prefix string, k int) []string {
	var names []string
	for i := 0; len(names) < k; i++ {
		name := fmt.Sprintf("%s-%d/lock", prefix, i)
		if leader, _ := leaderAndFollower(c, name); leader != id {
			names = append(names, name)
		}
	}
	return names
}

// observe streams the election's events on a channel, closed when the
// stream ends (at the test's end).
func observe(t *testing.T, e v1.ElectionClient, election string) <-chan *v1.ElectionEvent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st, err := e.Observe(ctx, &v1.ObserveRequest{Election: election})
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan *v1.ElectionEvent, 16)
	go func() {
		defer close(out)
		for {
			ev, err := st.Recv()
			if err != nil {
				return
			}
			out <- ev
		}
	}()
	return out
}

func equalStatuses(got []v1.Status, want ...v1.Status) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

// TestSessionsServiceBadInput: each malformed call is answered
// InvalidInput with a reason naming what is wrong, and renews or releases
// nothing.
func TestSessionsServiceBadInput(t *testing.T) {
	n := openNode(t, kahuna.Config{ListenAddress: "127.0.0.1:0"})
	w := dialServices(t, "http://"+n.ListenAddress())
	ctx := context.Background()
	d := v1.Durability_DURABILITY_PERSISTENT
	created, err := w.sessions.Create(ctx, &v1.CreateSessionRequest{TtlMs: 2000, Durability: d})
	if err != nil || created.GetStatus() != v1.Status_STATUS_LOCKED {
		t.Fatal(created, err)
	}
	id := created.GetId()
	if r, err := w.kahuna.Lock(ctx, &v1.LockRequest{Resource: "held", Owner: []byte(id), TtlMs: 2000, Durability: d}); err != nil || r.GetStatus() != v1.Status_STATUS_LOCKED {
		t.Fatal(r, err)
	}
	ends := func() [2]time.Time {
		var out [2]time.Time
		for i, name := range []string{"held", kahuna.SessionPrefix + id} {
			info, _, err := n.Get(ctx, name, kahuna.Persistent)
			if err != nil {
				t.Fatal(err)
			}
			out[i] = info.Expires
		}
		return out
	}
	before := ends()

	many := make([]string, 64)
	for i := range many {
		many[i] = "n" + strings.Repeat("x", i)
	}
	for _, tc := range []struct {
		name string
		req  *v1.KeepAliveRequest
		want string
	}{
		{"no ID", &v1.KeepAliveRequest{TtlMs: 20000, Durability: d, Locks: []string{"held"}}, "session ID is empty"},
		{"short ID", &v1.KeepAliveRequest{Id: "abc", TtlMs: 20000, Durability: d, Locks: []string{"held"}}, "session ID is 3 bytes, not 32"},
		{"upper-case ID", &v1.KeepAliveRequest{Id: strings.ToUpper(id), TtlMs: 20000, Durability: d}, "not lowercase hex"},
		{"64 locks", &v1.KeepAliveRequest{Id: id, TtlMs: 20000, Durability: d, Locks: many}, "64 locks, over the limit of 63"},
		{"a semaphore", &v1.KeepAliveRequest{Id: id, TtlMs: 20000, Durability: d, Locks: []string{"held", "semaphore:s"}}, "name 3 is a semaphore"},
		{"an empty name", &v1.KeepAliveRequest{Id: id, TtlMs: 20000, Durability: d, Locks: []string{"held", ""}}, "name 3"},
		{"a TTL over the limit", &v1.KeepAliveRequest{Id: id, TtlMs: 1 << 40, Durability: d, Locks: []string{"held"}}, "ttl"},
		{"no TTL", &v1.KeepAliveRequest{Id: id, Durability: d, Locks: []string{"held"}}, "ttl 0s is not positive"},
		{"an empty election", &v1.KeepAliveRequest{Id: id, TtlMs: 20000, Durability: d, Candidacies: []*v1.Candidacy{{}}}, "candidacy 1: election name is empty"},
		{"a value over the limit", &v1.KeepAliveRequest{Id: id, TtlMs: 20000, Durability: d, Candidacies: []*v1.Candidacy{{Election: "e", Value: make([]byte, kahuna.MaxElectionValue+1)}}}, "candidacy 1: value is"},
	} {
		ka, err := w.sessions.KeepAlive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := ka.Send(tc.req); err != nil {
			t.Fatal(err)
		}
		got, err := ka.Recv()
		if err != nil || got.GetStatus() != v1.Status_STATUS_INVALID_INPUT || !strings.Contains(got.GetReason(), tc.want) {
			t.Errorf("%s: %v %v, want InvalidInput with %q", tc.name, got, err, tc.want)
		}
		_ = ka.CloseSend()
		if after := ends(); after != before {
			t.Fatalf("%s changed a lease's end: %v → %v", tc.name, before, after)
		}
	}

	if r, err := w.sessions.Create(ctx, &v1.CreateSessionRequest{Durability: d}); err != nil || r.GetStatus() != v1.Status_STATUS_INVALID_INPUT || r.GetId() != "" || !strings.Contains(r.GetReason(), "ttl") {
		t.Errorf("Create with no TTL: %v %v", r, err)
	}
	if r, err := w.sessions.Close(ctx, &v1.CloseSessionRequest{Id: "nope", Durability: d, Locks: []string{"held"}}); err != nil || r.GetStatus() != v1.Status_STATUS_INVALID_INPUT {
		t.Errorf("Close with a malformed ID: %v %v", r, err)
	}
	if r, err := w.sessions.Close(ctx, &v1.CloseSessionRequest{Id: id, Durability: d, Locks: []string{"held", "rwlock:x"}}); err != nil || r.GetStatus() != v1.Status_STATUS_INVALID_INPUT {
		t.Errorf("Close with a read/write lock among the locks: %v %v", r, err)
	}
	for _, tc := range []struct {
		name string
		req  *v1.CampaignRequest
		want string
	}{
		{"an empty election", &v1.CampaignRequest{SessionId: id, TtlMs: 2000, Durability: d}, "election name is empty"},
		{"a value over the limit", &v1.CampaignRequest{Election: "e", Value: make([]byte, kahuna.MaxElectionValue+1), SessionId: id, TtlMs: 2000, Durability: d}, "value is"},
		{"no session", &v1.CampaignRequest{Election: "e", TtlMs: 2000, Durability: d}, "session ID is empty"},
		{"a TTL over the limit", &v1.CampaignRequest{Election: "e", SessionId: id, TtlMs: 1 << 40, Durability: d}, "ttl"},
	} {
		if r, err := w.election.Campaign(ctx, tc.req); err != nil || r.GetStatus() != v1.Status_STATUS_INVALID_INPUT || !strings.Contains(r.GetReason(), tc.want) {
			t.Errorf("Campaign with %s: %v %v, want InvalidInput with %q", tc.name, r, err, tc.want)
		}
	}
	if r, err := w.election.Proclaim(ctx, &v1.ProclaimRequest{Election: "e", SessionId: id, NewValue: make([]byte, kahuna.MaxElectionValue+1), TtlMs: 2000, Durability: d}); err != nil || r.GetStatus() != v1.Status_STATUS_INVALID_INPUT {
		t.Errorf("Proclaim of a value over the limit: %v %v", r, err)
	}
	if r, err := w.election.Leader(ctx, &v1.LeaderRequest{}); err != nil || r.GetStatus() != v1.Status_STATUS_INVALID_INPUT {
		t.Errorf("Leader of an empty election: %v %v", r, err)
	}
	if after := ends(); after != before {
		t.Fatalf("the bad calls changed a lease's end: %v → %v", before, after)
	}
	if r, _, _ := n.Get(ctx, "held", kahuna.Persistent); string(r.Owner) != id {
		t.Fatalf("held's holder after the bad calls: %q", r.Owner)
	}
}

// postJSON posts body to endpoint+path and decodes the JSON answer into
// reply; it returns the HTTP status. An answer that is MustRetry is asked
// again, as clients do (mustRetryFor); a keep-alive's too when it is
// MustRetry for one of its names (a renewal may be made twice). A close,
// whose names are each released on their own, is asked once.
func postJSON(t *testing.T, endpoint, path string, body, reply any) int {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(mustRetryFor); ; time.Sleep(5 * time.Millisecond) {
		code, answer := post(t, endpoint+path, b)
		var statuses struct {
			Type        int   `json:"type"`
			Locks       []int `json:"locks"`
			Candidacies []int `json:"candidacies"`
		}
		_ = json.Unmarshal(answer, &statuses) // not every answer is an object
		mr := int(kahuna.MustRetry)
		again := statuses.Type == mr
		switch path {
		case "/v1/sessions/close":
			again = false
		case "/v1/sessions/keep-alive":
			again = again || slices.Contains(statuses.Locks, mr) || slices.Contains(statuses.Candidacies, mr)
		}
		if !again || time.Now().After(deadline) {
			if err := json.Unmarshal(answer, reply); err != nil {
				t.Fatalf("%s: decoding the answer %q: %v", path, answer, err)
			}
			return code
		}
	}
}

// post posts the JSON body b to url and returns the HTTP status and the
// answer's body.
func post(t *testing.T, url string, b []byte) (int, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s: reading the answer: %v", url, err)
	}
	return resp.StatusCode, answer
}

// restEvent is an election event as REST answers it.
type restEvent struct {
	Kind     int    `json:"kind"`
	Value    []byte `json:"value"`
	Epoch    int64  `json:"epoch"`
	Revision uint64 `json:"revision"`
}

// TestSessionsAndElectionOverREST: the same services over REST through a
// member that forwards: a session with a lock and a candidacy renewed by
// one keep-alive, a proclaim seen by a long-polling observe that resumes
// after the last event it got, the close, and bad input.
func TestSessionsAndElectionOverREST(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 4, steadyLeaders)
	const election = "rest-ledger"
	_, follower := leaderAndFollower(c, kahuna.ElectionPrefix+election)
	ep := c.Member(follower).Endpoint
	lock := namesNotLedBy(c, follower, "rest", 1)[0]

	var created struct {
		Type   int    `json:"type"`
		ID     string `json:"id"`
		Reason string `json:"reason"`
	}
	if code := postJSON(t, ep, "/v1/sessions/create", map[string]any{"ttlMs": 2000, "durability": 1}, &created); code != 200 || created.Type != int(kahuna.Locked) || len(created.ID) != 32 {
		t.Fatalf("create: %d %+v", code, created)
	}
	id := created.ID
	var locked struct{ Type int }
	if postJSON(t, ep, "/v1/locks/try-lock", map[string]any{"resource": lock, "owner": []byte(id), "expiresMs": 2000, "durability": 1}, &locked); locked.Type != int(kahuna.Locked) {
		t.Fatalf("try-lock in the session: %+v", locked)
	}
	var camp struct {
		Type  int   `json:"type"`
		Epoch int64 `json:"epoch"`
	}
	if postJSON(t, ep, "/v1/elections/campaign", map[string]any{"election": election, "value": []byte("a"), "sessionId": id, "ttlMs": 2000, "durability": 1}, &camp); camp.Type != int(kahuna.Locked) {
		t.Fatalf("campaign: %+v", camp)
	}

	var kept struct {
		Type        int   `json:"type"`
		Locks       []int `json:"locks"`
		Candidacies []int `json:"candidacies"`
	}
	before := time.Now()
	postJSON(t, ep, "/v1/sessions/keep-alive", map[string]any{"id": id, "ttlMs": 20000, "durability": 1, "locks": []string{lock},
		"candidacies": []map[string]any{{"election": election, "value": []byte("a")}}}, &kept)
	ext := int(kahuna.Extended)
	if kept.Type != ext || !slices.Equal(kept.Locks, []int{ext}) || !slices.Equal(kept.Candidacies, []int{ext}) {
		t.Fatalf("keep-alive: %+v", kept)
	}
	if end := expiresOf(t, c, lock, id); end.Before(before.Add(15 * time.Second)) {
		t.Fatalf("the lock's lease ends at %v after the keep-alive, want 20 s after %v", end, before)
	}

	type observed struct {
		Type   int         `json:"type"`
		Events []restEvent `json:"events"`
	}
	var first observed
	postJSON(t, ep, "/v1/elections/observe", map[string]any{"election": election, "waitMs": 10000}, &first)
	if len(first.Events) != 1 || first.Events[0].Kind != int(kahuna.Elected) || string(first.Events[0].Value) != "a" || first.Events[0].Epoch != camp.Epoch {
		t.Fatalf("observe from nothing: %+v, want elected a epoch %d", first, camp.Epoch)
	}
	next := make(chan observed, 1)
	go func() {
		var o observed
		postJSON(t, ep, "/v1/elections/observe", map[string]any{"election": election, "waitMs": 20000, "last": first.Events[0]}, &o)
		next <- o
	}()
	var proclaimed struct{ Type int }
	postJSON(t, ep, "/v1/elections/proclaim", map[string]any{"election": election, "sessionId": id, "value": []byte("a"), "newValue": []byte("b"), "ttlMs": 20000, "durability": 1}, &proclaimed)
	if proclaimed.Type != ext {
		t.Fatalf("proclaim: %+v", proclaimed)
	}
	if o := <-next; len(o.Events) != 1 || o.Events[0].Kind != int(kahuna.Proclaimed) || string(o.Events[0].Value) != "b" || o.Events[0].Epoch != camp.Epoch {
		t.Fatalf("observe after the last event, across a proclaim: %+v", o)
	}
	var leader struct {
		Type      int    `json:"type"`
		Value     []byte `json:"value"`
		Epoch     int64  `json:"epoch"`
		SessionID string `json:"sessionId"`
	}
	if postJSON(t, ep, "/v1/elections/leader", map[string]any{"election": election}, &leader); leader.Type != int(kahuna.Got) || string(leader.Value) != "b" || leader.Epoch != camp.Epoch || leader.SessionID != id {
		t.Fatalf("leader: %+v", leader)
	}

	// Close releases each name on its own: one answered MustRetry (nothing
	// applied to it) is closed again, alone, as a client does; the others
	// keep their first answer.
	type closeAnswer struct {
		Type        int   `json:"type"`
		Locks       []int `json:"locks"`
		Candidacies []int `json:"candidacies"`
	}
	un, mr := int(kahuna.Unlocked), int(kahuna.MustRetry)
	closed := closeAnswer{Type: mr, Locks: []int{mr}, Candidacies: []int{mr}}
	for deadline := time.Now().Add(mustRetryFor); ; time.Sleep(5 * time.Millisecond) {
		req := map[string]any{"id": id, "durability": 1}
		if closed.Locks[0] == mr {
			req["locks"] = []string{lock}
		}
		if closed.Candidacies[0] == mr {
			req["candidacies"] = []map[string]any{{"election": election, "value": []byte("b")}}
		}
		var got closeAnswer
		postJSON(t, ep, "/v1/sessions/close", req, &got)
		if closed.Type == mr {
			closed.Type = got.Type
		}
		if closed.Locks[0] == mr && len(got.Locks) == 1 {
			closed.Locks[0] = got.Locks[0]
		}
		if closed.Candidacies[0] == mr && len(got.Candidacies) == 1 {
			closed.Candidacies[0] = got.Candidacies[0]
		}
		if !slices.Contains([]int{closed.Type, closed.Locks[0], closed.Candidacies[0]}, mr) || time.Now().After(deadline) {
			break
		}
	}
	if closed.Type != un || !slices.Equal(closed.Locks, []int{un}) || !slices.Equal(closed.Candidacies, []int{un}) {
		t.Fatalf("close: %+v", closed)
	}
	if end := expiresOf(t, c, lock, id); !end.IsZero() {
		t.Fatal("the lock is still held after close")
	}

	// Bad input: a clear reason, or 400 for a body that is no request.
	var bad struct {
		Type   int    `json:"type"`
		Reason string `json:"reason"`
		Error  string `json:"error"`
	}
	if postJSON(t, ep, "/v1/sessions/keep-alive", map[string]any{"id": "xyz", "ttlMs": 1000}, &bad); bad.Type != int(kahuna.InvalidInput) || !strings.Contains(bad.Reason, "session ID") {
		t.Errorf("keep-alive with a bad ID: %+v", bad)
	}
	bad.Type, bad.Reason = 0, ""
	if postJSON(t, ep, "/v1/elections/observe", map[string]any{"election": "", "waitMs": 10}, &bad); bad.Type != int(kahuna.InvalidInput) || !strings.Contains(bad.Reason, "election name is empty") {
		t.Errorf("observe of an empty election: %+v", bad)
	}
	if code := postJSON(t, ep, "/v1/elections/campaign", []int{1}, &bad); code != http.StatusBadRequest || bad.Error == "" {
		t.Errorf("campaign with a body that is no object: %d %+v", code, bad)
	}
}

// TestCampaignOnASessionThatIsNotLive: a campaign on a closed session,
// or one never created, is refused naming the session, and takes nothing.
func TestCampaignOnASessionThatIsNotLive(t *testing.T) {
	n := openNode(t, kahuna.Config{ListenAddress: "127.0.0.1:0"})
	w := dialServices(t, "http://"+n.ListenAddress())
	ctx := context.Background()
	d := v1.Durability_DURABILITY_PERSISTENT
	created, err := w.sessions.Create(ctx, &v1.CreateSessionRequest{TtlMs: 5000, Durability: d})
	if err != nil || created.GetStatus() != v1.Status_STATUS_LOCKED {
		t.Fatal(created, err)
	}
	if r, err := w.sessions.Close(ctx, &v1.CloseSessionRequest{Id: created.GetId(), Durability: d}); err != nil || r.GetStatus() != v1.Status_STATUS_UNLOCKED {
		t.Fatal(r, err)
	}
	for _, id := range []string{created.GetId(), strings.Repeat("ab", 16)} {
		r, err := w.election.Campaign(ctx, &v1.CampaignRequest{Election: "e", Value: []byte("v"), SessionId: id, TtlMs: 5000, Durability: d})
		if err != nil || r.GetStatus() != v1.Status_STATUS_LOCK_DOES_NOT_EXIST || !strings.Contains(r.GetReason(), "session "+id+" is not live") {
			t.Errorf("Campaign on session %s that is not live: %v %v", id, r, err)
		}
	}
	if info, r, err := n.Get(ctx, kahuna.ElectionPrefix+"e", kahuna.Persistent); err != nil || r.Status != kahuna.LockDoesNotExist {
		t.Fatalf("the election after the refused campaigns: %v %v %v, want no leader", info, r, err)
	}
}
