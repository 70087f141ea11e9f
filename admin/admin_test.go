package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// The JSON of every message is the contract between kahunactl and members
// of any version: a renamed field would break them silently.
func TestWireFormat(t *testing.T) {
	for _, c := range []struct {
		v    any
		want string
	}{
		{PartitionsView{Node: 1, Partitions: []PartitionInfo{{Partition: 2, Leader: 3, Serving: true}}},
			`{"node":1,"partitions":[{"partition":2,"leader":3,"serving":true}]}`},
		{TransferRequest{Partition: 1, To: 2}, `{"partition":1,"to":2}`},
		{MembersView{Node: 1, DeploymentID: 2, TokenHash: "h", Members: []MemberInfo{{ID: 3, RaftAddress: "r", Endpoint: "e", Joined: true, Partitions: []int{0}}}, Removed: []uint64{4}},
			`{"node":1,"deployment_id":2,"token_hash":"h","members":[{"id":3,"raft_address":"r","endpoint":"e","joined":true,"partitions":[0]}],"removed":[4]}`},
		{MemberRequest{ID: 1}, `{"id":1}`},
		{MemberRequest{ID: 1, RaftAddress: "r", Endpoint: "e", Op: "add", Partitions: []int{0}},
			`{"id":1,"raft_address":"r","endpoint":"e","op":"add","partitions":[0]}`},
		{MemberChangeResult{Op: "add", ID: 1, Done: []int{}}, `{"op":"add","id":1,"done":[]}`},
		{MemberChangeResult{Op: "remove", ID: 1, Done: []int{0}, Left: map[int]string{1: "x"}, Removed: true, Error: "e"},
			`{"op":"remove","id":1,"done":[0],"left":{"1":"x"},"removed":true,"error":"e"}`},
		{NodeStatus{Node: 1, Healthy: true, Partitions: []PartitionStatus{{Partition: 0, Leader: 2, Term: 3, Applied: 4, Serving: true, Voters: []uint64{1, 2}, Running: true}}, NoSpace: "full"},
			`{"node":1,"healthy":true,"partitions":[{"partition":0,"leader":2,"term":3,"applied":4,"serving":true,"voters":[1,2],"running":true}],"noSpace":"full"}`},
	} {
		got, err := json.Marshal(c.v)
		if err != nil || string(got) != c.want {
			t.Errorf("%T: %s (%v), want %s", c.v, got, err, c.want)
		}
	}
}

// fakeNode is a Node of two partitions whose answers a test sets.
type fakeNode struct {
	mu       sync.Mutex
	id       uint64
	change   error // AddMember and RemoveMember
	transfer func() (uint64, error)
	peers    map[uint64]string // endpoints
	seen     []MemberRequest   // PeerChange calls
}

func (f *fakeNode) Partitions() PartitionsView {
	return PartitionsView{Node: f.id, Partitions: []PartitionInfo{{Partition: 0, Leader: f.id, Serving: true}, {Partition: 1, Leader: 9}}}
}
func (f *fakeNode) Status() NodeStatus { return NodeStatus{Node: f.id, Healthy: true} }
func (f *fakeNode) Members() MembersView {
	return MembersView{Node: f.id, Members: []MemberInfo{{ID: f.id}}}
}
func (f *fakeNode) AddMember(context.Context, uint64, string, string) error {
	return f.change
}
func (f *fakeNode) RemoveMember(context.Context, uint64) error { return f.change }
func (f *fakeNode) TransferLeadership(int, uint64) (uint64, error) {
	if f.transfer == nil {
		return 0, nil
	}
	return f.transfer()
}
func (f *fakeNode) Endpoint(id uint64) string { return f.peers[id] }
func (f *fakeNode) ListLocks(_ context.Context, req LocksRequest) (LocksView, error) {
	if req.Limit < 0 {
		return LocksView{}, fmt.Errorf("%w: limit is negative", ErrInvalidList)
	}
	return LocksView{Node: f.id, Locks: []Lock{{Resource: req.Prefix + "a", Owner: []byte("o"), FencingToken: 1, ExpiresMs: 2, Durability: 1}}, NotServed: req.Partitions}, nil
}
func (f *fakeNode) PeerChange(_ context.Context, req MemberRequest) (MemberChangeResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seen = append(f.seen, req)
	if req.Op == "add" && req.ID == 3 {
		return MemberChangeResult{}, ErrMemberRemoved
	}
	return MemberChangeResult{Op: req.Op, ID: req.ID, Done: req.Partitions}, nil
}

// serve serves n's admin API, recording each request's Authorization and
// peer mark, and returns its URL.
func serve(t *testing.T, n Node, c *Client, seen *[]string) string {
	t.Helper()
	h := NewHandler(n, c)
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if seen != nil {
			mu.Lock()
			*seen = append(*seen, fmt.Sprintf("%s %s auth=%q peer=%v", r.Method, r.URL.Path, r.Header.Get("Authorization"), fromPeer(r)))
			mu.Unlock()
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestClientReads(t *testing.T) {
	ctx := context.Background()
	ep := serve(t, &fakeNode{id: 7}, NewClient(), nil)
	c := NewClient(WithTimeout(0))
	if v, err := c.Partitions(ctx, ep+"/"); err != nil || v.Node != 7 || len(v.Partitions) != 2 || v.Partitions[1].Leader != 9 {
		t.Fatalf("partitions: %+v %v", v, err)
	}
	if st, err := c.Status(ctx, ep); err != nil || st.Node != 7 || !st.Healthy {
		t.Fatalf("status: %+v %v", st, err)
	}
	if v, err := c.Members(ctx, ep); err != nil || len(v.Members) != 1 || v.Members[0].ID != 7 {
		t.Fatalf("members: %+v %v", v, err)
	}
}

// A member's share of a listing goes over the query and back: prefix,
// after, limit and partitions as asked (an empty prefix and the empty
// partition list included), a malformed query or a refused request 400.
func TestClientListLocks(t *testing.T) {
	ctx := context.Background()
	ep := serve(t, &fakeNode{id: 7}, NewClient(), nil)
	c := NewClient()
	v, err := c.ListLocks(ctx, ep, LocksRequest{Prefix: "a b&c=/", After: "x", Limit: 5, Partitions: []int{0, 3}})
	if err != nil || v.Node != 7 || len(v.Locks) != 1 || v.Locks[0].Resource != "a b&c=/a" || string(v.Locks[0].Owner) != "o" ||
		v.Locks[0].Durability != 1 || fmt.Sprint(v.NotServed) != "[0 3]" {
		t.Fatalf("list: %+v %v", v, err)
	}
	for _, q := range []url.Values{{"prefix": {"p"}, "after": {"a"}, "limit": {"7"}, "partitions": {"1,2"}}, {}, {"partitions": {""}}} {
		req, err := ParseLocksQuery(q)
		if err != nil {
			t.Fatalf("%v: %v", q, err)
		}
		if back, _ := ParseLocksQuery(req.Query()); fmt.Sprintf("%#v", back) != fmt.Sprintf("%#v", req) {
			t.Errorf("%v: %#v, then %#v", q, req, back)
		}
	}
	if req, _ := ParseLocksQuery(url.Values{"partitions": {""}}); req.Partitions == nil {
		t.Error("an empty partition list reads as none given (every partition)")
	}
	var e *Error
	for _, q := range []string{"limit=x", "partitions=1,-2", "partitions=a", "limit=-1"} {
		resp, err := c.Do(ctx, ep, http.MethodGet, LocksPath+"?"+q, nil, nil)
		if err != nil || resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: %v %v", q, resp, err)
		}
	}
	if _, err := c.ListLocks(ctx, ep, LocksRequest{Limit: -1}); !errors.As(err, &e) || e.Code != http.StatusBadRequest || !strings.Contains(e.Message, "negative") {
		t.Fatalf("refused: %v", err)
	}
}

// A membership change answers its result whatever the status, and the
// status says whether to retry (503) or not (409, 400).
func TestClientMemberChange(t *testing.T) {
	ctx := context.Background()
	n := &fakeNode{id: 1}
	ep := serve(t, n, NewClient(), nil)
	c := NewClient()
	res, err := c.AddMember(ctx, ep, MemberRequest{ID: 4, RaftAddress: "r", Endpoint: "http://e"})
	if err != nil || res.Op != "add" || fmt.Sprint(res.Done) != "[0 1]" {
		t.Fatalf("add: %+v %v", res, err)
	}
	for _, c2 := range []struct {
		err     error
		code    int
		removed bool
		left    int
	}{
		{&MembershipError{Op: "remove", ID: 4, Done: []int{0}, Left: map[int]error{1: errors.New("electing")}}, 503, false, 1},
		{&MembershipError{Op: "remove", ID: 4, Left: map[int]error{0: ErrMemberRemoved}}, 409, true, 1},
		{fmt.Errorf("%w: at x", ErrMemberConflict), 409, false, 0},
		{errors.New("member ID 0 is not allowed"), 400, false, 0},
		{fmt.Errorf("node 9: %w", ErrNotMember), 404, false, 0},
	} {
		n.change = c2.err
		res, err := c.RemoveMember(ctx, ep, 4)
		var e *Error
		if !errors.As(err, &e) || e.Code != c2.code || e.Method != http.MethodDelete || e.Path != MembersPath+"/4" || e.Endpoint != ep {
			t.Fatalf("%v: %v, want an *Error of %d", c2.err, err, c2.code)
		}
		if res.Op != "remove" || res.ID != 4 || res.Removed != c2.removed || len(res.Left) != c2.left || res.Error != c2.err.Error() || e.Message != c2.err.Error() {
			t.Fatalf("%v: result %+v, message %q", c2.err, res, e.Message)
		}
	}
	if _, err := c.AddMember(ctx, ep, MemberRequest{ID: 4, Op: "add"}); err == nil || !strings.Contains(err.Error(), "op and partitions are for requests between nodes") {
		t.Fatalf("an op from a client: %v", err)
	}
	if len(n.seen) != 0 {
		t.Fatalf("a client's request served as a peer's: %+v", n.seen)
	}
}

// WithPeerSecret marks requests as between members and carries the
// secret; the handler serves those through PeerChange.
func TestPeerRequests(t *testing.T) {
	ctx := context.Background()
	n := &fakeNode{id: 1}
	var seen []string
	ep := serve(t, n, NewClient(), &seen)
	secret := "s1"
	peer := NewClient(WithToken("ignored"), WithPeerSecret(func() string { return secret }))
	if res, err := peer.AddMember(ctx, ep, MemberRequest{ID: 4, Op: "add", Partitions: []int{1}}); err != nil || fmt.Sprint(res.Done) != "[1]" {
		t.Fatalf("peer add: %+v %v", res, err)
	}
	secret = ""
	if _, err := peer.AddMember(ctx, ep, MemberRequest{ID: 4, RaftAddress: "r", Endpoint: "http://e", Op: "learn"}); err != nil {
		t.Fatalf("learn: %v", err)
	}
	res, err := peer.AddMember(ctx, ep, MemberRequest{ID: 3, Op: "add", Partitions: []int{0}})
	var e *Error
	if !errors.As(err, &e) || e.Code != http.StatusConflict || !res.Removed || res.Error != ErrMemberRemoved.Error() {
		t.Fatalf("peer add of a removed ID: %+v %v", res, err)
	}
	for _, bad := range []MemberRequest{{ID: 4, Op: "learn"}, {ID: 4, Op: "promote"}} {
		if _, err := peer.AddMember(ctx, ep, bad); !errors.As(err, &e) || e.Code != http.StatusBadRequest {
			t.Fatalf("%+v: %v, want 400", bad, err)
		}
	}
	if len(n.seen) != 3 {
		t.Fatalf("PeerChange got %+v", n.seen)
	}
	want := `POST /v1/admin/members auth="Bearer s1" peer=true`
	if seen[0] != want || !strings.HasSuffix(seen[1], `auth="" peer=true`) {
		t.Fatalf("requests seen: %q, want first %q and the second without a token", seen, want)
	}
}

// A transfer asked of a node that does not lead the partition is passed
// on to the leader once, with the caller's token instead of the secret,
// and the leader's answer relayed.
func TestTransferPassedOn(t *testing.T) {
	ctx := context.Background()
	var seen []string
	peer := NewClient(WithPeerSecret(func() string { return "secret" }))
	leader := &fakeNode{id: 2}
	leaderEP := serve(t, leader, peer, &seen)
	follower := &fakeNode{id: 1, peers: map[uint64]string{2: leaderEP}, transfer: func() (uint64, error) {
		return 2, fmt.Errorf("partition 0 is led by node 2: %w", ErrNotLeader)
	}}
	followerEP := serve(t, follower, peer, nil)

	if err := NewClient(WithToken("client-token")).Transfer(ctx, followerEP, TransferRequest{Partition: 0, To: 1}); err != nil {
		t.Fatalf("transfer via the follower: %v", err)
	}
	if want := `POST /v1/admin/transfer-leadership auth="Bearer client-token" peer=true`; len(seen) != 1 || seen[0] != want {
		t.Fatalf("the leader saw %q, want %q", seen, want)
	}

	// Passed on only once: a node that does not lead, asked by a peer,
	// says so (503); a leader it has no endpoint for, likewise.
	leader.transfer = follower.transfer
	err := NewClient(WithToken("client-token")).Transfer(ctx, followerEP, TransferRequest{Partition: 0, To: 1})
	var e *Error
	if !errors.As(err, &e) || e.Code != http.StatusServiceUnavailable || e.Message != "partition 0 is led by node 2: not the partition's leader" {
		t.Fatalf("transfer passed on to a non-leader: %v", err)
	}
	delete(follower.peers, 2)
	if err := NewClient().Transfer(ctx, followerEP, TransferRequest{}); !errors.As(err, &e) || e.Code != http.StatusServiceUnavailable || !strings.Contains(e.Message, "which has no endpoint") {
		t.Fatalf("no endpoint for the leader: %v", err)
	}
	follower.transfer = func() (uint64, error) { return 0, errors.New("kahuna: node 5 is not a member") }
	if err := NewClient().Transfer(ctx, followerEP, TransferRequest{To: 5}); !errors.As(err, &e) || e.Code != http.StatusBadRequest ||
		e.Error() != "POST "+followerEP+TransferPath+": 400 Bad Request: kahuna: node 5 is not a member" {
		t.Fatalf("transfer to a non-member: %v", err)
	}
}

// A failure answer's message is the server's error, else its reason, else
// its body; a call that got no answer is net/http's error, naming the URL.
func TestClientErrors(t *testing.T) {
	ctx := context.Background()
	body := ""
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, body)
	}))
	c := NewClient()
	for b, want := range map[string]string{
		`{"error":"missing bearer token"}`:  "missing bearer token",
		`{"reason":"resource too long"}`:    "resource too long",
		"  plain text\n":                    "plain text",
		`{"error":"a","reason":"b"}` + "\n": "a",
	} {
		body = b
		_, err := c.Status(ctx, srv.URL)
		var e *Error
		if !errors.As(err, &e) || e.Message != want || e.Status != "401 Unauthorized" || e.Path != StatusPath {
			t.Fatalf("body %q: %v, want message %q", b, err, want)
		}
	}
	srv.Close()
	_, err := c.Members(ctx, srv.URL)
	var e *Error
	var ue *url.Error
	if errors.As(err, &e) || !errors.As(err, &ue) || !strings.Contains(err.Error(), strings.TrimPrefix(srv.URL, "http://")+MembersPath) {
		t.Fatalf("no answer: %v", err)
	}
}
