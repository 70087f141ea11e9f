package kahuna

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kahunago/kahuna/durability"
)

// Admin API paths of membership and status.
const (
	// AdminMembersPath: GET lists the members (MembersView); POST adds one
	// (a MemberRequest); DELETE AdminMembersPath/ID removes one. POST and
	// DELETE answer a MemberChangeResult: 200 when every partition is done,
	// else 503 (retry the same request to finish) or 409 (refused for good,
	// e.g. a removed ID).
	AdminMembersPath = "/v1/admin/members"
	// AdminStatusPath: GET is this node's view (NodeStatus).
	AdminStatusPath = "/v1/admin/status"
)

// AdminRoutes maps every admin path pattern to the node's AdminHandler, for
// servers that mount the admin API themselves (ServerOptions.Extra).
func (n *Node) AdminRoutes() map[string]http.Handler {
	h := n.AdminHandler()
	return map[string]http.Handler{
		AdminPartitionsPath:    h,
		AdminTransferPath:      h,
		AdminMembersPath:       h,
		AdminMembersPath + "/": h,
		AdminStatusPath:        h,
	}
}

// MemberInfo is one member in a MembersView.
type MemberInfo struct {
	ID          uint64 `json:"id"`
	RaftAddress string `json:"raft_address"`
	Endpoint    string `json:"endpoint"`
	// Joined: the member has started with its replicas (a founding
	// member, or an added one that joined); false for one added and not
	// started yet.
	Joined bool `json:"joined"`
	// Partitions where it is a voter, as Raft on the answering node says.
	Partitions []int `json:"partitions"`
}

// MembersView is GET AdminMembersPath: the members as one node knows them.
type MembersView struct {
	Node         uint64       `json:"node"`
	DeploymentID uint64       `json:"deployment_id"`
	TokenHash    string       `json:"token_hash"`
	Members      []MemberInfo `json:"members"`
	Removed      []uint64     `json:"removed,omitempty"`
}

// MemberRequest is POST AdminMembersPath: add member ID. Op and Partitions
// are for requests between nodes (the Kahuna-Forwarded header set).
type MemberRequest struct {
	ID          uint64 `json:"id"`
	RaftAddress string `json:"raft_address,omitempty"`
	Endpoint    string `json:"endpoint,omitempty"`
	// Op, between nodes: "add" or "remove" on Partitions (which the
	// receiver leads), "learn" (record an added member), "forget" (record
	// a removal), "joined" (the member has started).
	Op         string `json:"op,omitempty"`
	Partitions []int  `json:"partitions,omitempty"`
}

// MemberChangeResult answers a membership change: the partitions where it
// is done and those left, with why.
type MemberChangeResult struct {
	Op      string         `json:"op"`
	ID      uint64         `json:"id"`
	Done    []int          `json:"done"`
	Left    map[int]string `json:"left,omitempty"`
	Removed bool           `json:"removed,omitempty"` // refused: a removed ID
	Error   string         `json:"error,omitempty"`
}

// PartitionStatus is one partition in a NodeStatus.
type PartitionStatus struct {
	Partition int      `json:"partition"`
	Leader    uint64   `json:"leader"` // 0: none known
	Term      uint64   `json:"term"`
	Applied   uint64   `json:"applied"` // Raft index applied here
	Serving   bool     `json:"serving"` // this node serves it now (leader with a live lease)
	Voters    []uint64 `json:"voters"`
	Running   bool     `json:"running"` // this node runs a replica of it
}

// NodeStatus is GET AdminStatusPath: one node's view of every partition.
type NodeStatus struct {
	Node uint64 `json:"node"`
	// Healthy: this node runs every partition and knows a leader for each.
	Healthy    bool              `json:"healthy"`
	Partitions []PartitionStatus `json:"partitions"`
	// NoSpace, when set, says why this node refuses new persistent locks:
	// its disk is short of space (Config.DiskReserve, StoreQuota).
	NoSpace string `json:"noSpace,omitempty"`
}

// Status reports this node's view of every partition (local, no network:
// it may be stale), as GET AdminStatusPath does.
func (n *Node) Status() NodeStatus {
	st := NodeStatus{Node: n.cfg.NodeID, Healthy: !n.closing.Load()}
	st.NoSpace, _ = n.noSpace()
	for _, s := range n.backend.Status() {
		_, serving := n.leadership.Serving(s.Partition)
		if leader, _ := n.leadership.LeaderOf(s.Partition); s.Leader == 0 && leader != 0 {
			s.Leader = leader // the leader this node forwards to (a step ahead of dragonboat's cached view)
		}
		st.Partitions = append(st.Partitions, PartitionStatus{
			Partition: s.Partition, Leader: s.Leader, Term: s.Term, Applied: s.Applied,
			Serving: serving, Voters: s.Voters, Running: s.Running,
		})
		if !s.Running || s.Leader == 0 {
			st.Healthy = false
		}
	}
	return st
}

// membersView is this node's MembersView.
func (n *Node) membersView() MembersView {
	b := n.book.snapshot()
	v := MembersView{Node: n.cfg.NodeID, DeploymentID: n.backend.DeploymentID(), TokenHash: durability.TokenHash(n.cfg.InitialClusterToken), Removed: b.Removed}
	voterIn := map[uint64][]int{}
	for _, s := range n.backend.Status() {
		for _, id := range s.Voters {
			voterIn[id] = append(voterIn[id], s.Partition)
		}
	}
	ids := slices.Collect(maps.Keys(b.Members))
	for id := range voterIn {
		if _, ok := b.Members[id]; !ok {
			ids = append(ids, id) // a voter this node has no endpoint for
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		e := b.Members[id]
		v.Members = append(v.Members, MemberInfo{ID: id, RaftAddress: e.RaftAddress, Endpoint: e.Endpoint, Joined: e.Joined, Partitions: voterIn[id]})
	}
	return v
}

// memberRoutes adds the membership and status routes to mux.
func (n *Node) memberRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET "+AdminMembersPath, func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, n.membersView())
	})
	mux.HandleFunc("GET "+AdminStatusPath, func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, n.Status())
	})
	mux.HandleFunc("POST "+AdminMembersPath, func(w http.ResponseWriter, r *http.Request) {
		var req MemberRequest
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("bad member request: %v", err)})
			return
		}
		if r.Header.Get(adminForwardedHeader) != "" {
			n.serveForwardedChange(w, r.Context(), req)
			return
		}
		if req.Op != "" || req.Partitions != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "op and partitions are for requests between nodes"})
			return
		}
		err := n.AddMember(r.Context(), req.ID, Member{RaftAddress: req.RaftAddress, Endpoint: req.Endpoint})
		writeChange(w, "add", req.ID, n.cfg.Partitions, err)
	})
	mux.HandleFunc("DELETE "+AdminMembersPath+"/{id}", func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
		if err != nil || id == 0 {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("bad member ID %q", r.PathValue("id"))})
			return
		}
		err = n.RemoveMember(r.Context(), id)
		writeChange(w, "remove", id, n.cfg.Partitions, err)
	})
}

// writeChange answers a membership change with its MemberChangeResult.
func writeChange(w http.ResponseWriter, op string, id uint64, partitions int, err error) {
	res := MemberChangeResult{Op: op, ID: id, Done: []int{}}
	var me *MembershipError
	switch {
	case err == nil:
		for p := range partitions {
			res.Done = append(res.Done, p)
		}
		writeJSON(w, http.StatusOK, res)
		return
	case errors.As(err, &me):
		res.Done = append(res.Done, me.Done...)
		res.Left = map[int]string{}
		for p, e := range me.Left {
			res.Left[p] = e.Error()
		}
	}
	res.Error = err.Error()
	res.Removed = errors.Is(err, ErrMemberRemoved)
	code := http.StatusServiceUnavailable
	switch {
	case res.Removed || errors.Is(err, errMemberConflict):
		code = http.StatusConflict
	case me == nil:
		code = http.StatusBadRequest
	}
	writeJSON(w, code, res)
}

// serveForwardedChange serves a request of another node.
func (n *Node) serveForwardedChange(w http.ResponseWriter, ctx context.Context, req MemberRequest) {
	m := Member{RaftAddress: req.RaftAddress, Endpoint: req.Endpoint}
	switch req.Op {
	case "learn", "joined":
		if req.ID == 0 || m.RaftAddress == "" || m.Endpoint == "" {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "learn needs id, raft_address and endpoint"})
			return
		}
		if !n.book.removed(req.ID) {
			n.learn(req.ID, m, req.Op == "joined")
		}
		writeJSON(w, http.StatusOK, map[string]string{})
		return
	case "forget":
		n.unlearn(req.ID)
		writeJSON(w, http.StatusOK, map[string]string{})
		return
	case "add", "remove":
	default:
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("unknown op %q", req.Op)})
		return
	}
	if err := n.canChangeMembers(); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
		return
	}
	if req.Op == "add" {
		if n.book.removed(req.ID) {
			writeJSON(w, http.StatusConflict, MemberChangeResult{Op: req.Op, ID: req.ID, Removed: true, Error: ErrMemberRemoved.Error()})
			return
		}
		n.learn(req.ID, m, false)
	}
	ch := memberChange{op: req.Op, id: req.ID, member: m}
	res := MemberChangeResult{Op: req.Op, ID: req.ID, Done: []int{}, Left: map[int]string{}}
	for _, p := range req.Partitions {
		if p < 0 || p >= n.cfg.Partitions {
			res.Left[p] = "no such partition"
			continue
		}
		err := n.changeHere(ctx, p, ch)
		switch {
		case err == nil:
			res.Done = append(res.Done, p)
		default:
			res.Left[p] = err.Error()
			if errors.Is(err, ErrMemberRemoved) {
				res.Removed = true
			}
		}
	}
	writeJSON(w, http.StatusOK, res)
}

// postMember sends req to member id's admin API, as a request between
// nodes, decoding the answer into into (if not nil).
func (n *Node) postMember(ctx context.Context, id uint64, req MemberRequest, into any) error {
	m, ok := n.book.get(id)
	if !ok || m.Endpoint == "" {
		return fmt.Errorf("no endpoint known for node %d", id)
	}
	return n.postAdmin(ctx, m.Endpoint, req, into)
}

// authorizePeer makes hr a request between nodes: marked as passed on, and
// carrying the cluster secret (peer_auth.go) when there is one, which every
// member's admin API accepts.
func authorizePeer(hr *http.Request, secret func() string) {
	hr.Header.Set(adminForwardedHeader, "1")
	if secret != nil {
		if tok := secret(); tok != "" {
			hr.Header.Set("Authorization", "Bearer "+tok)
		}
	}
}

func (n *Node) postAdmin(ctx context.Context, endpoint string, req MemberRequest, into any) error {
	body, _ := json.Marshal(req)
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(endpoint, "/")+AdminMembersPath, bytes.NewReader(body))
	if err != nil {
		return err
	}
	hr.Header.Set("Content-Type", "application/json")
	authorizePeer(hr, n.cfg.peerSecret())
	resp, err := n.adminHTTP.Do(hr)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 && resp.StatusCode != http.StatusConflict {
		return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(data)))
	}
	if into != nil {
		if err := json.Unmarshal(data, into); err != nil {
			return fmt.Errorf("bad answer from %s: %w", endpoint, err)
		}
	}
	return nil
}

// forwardChange asks leader to apply ch to partitions ps, which it leads.
func (n *Node) forwardChange(ctx context.Context, leader uint64, ch memberChange, ps []int) (MemberChangeResult, error) {
	var res MemberChangeResult
	err := n.postMember(ctx, leader, MemberRequest{
		ID: ch.id, RaftAddress: ch.member.RaftAddress, Endpoint: ch.member.Endpoint, Op: ch.op, Partitions: ps,
	}, &res)
	if err != nil {
		return res, fmt.Errorf("pass the change on to node %d (its leader): %w", leader, err)
	}
	return res, nil
}

// announce tells every other member known here (best effort) of an added
// member's endpoint or a removal, so their forwarding and address books
// follow. A member that misses it learns an added member's endpoint when
// that member joins (it announces itself).
func (n *Node) announce(ch memberChange) {
	req := MemberRequest{ID: ch.id, Op: "forget"}
	if ch.op == "add" {
		req = MemberRequest{ID: ch.id, RaftAddress: ch.member.RaftAddress, Endpoint: ch.member.Endpoint, Op: "learn"}
	}
	n.tellAll(req, ch.id)
}

// tellAll posts req to every other member known here but skip.
func (n *Node) tellAll(req MemberRequest, skip uint64) {
	for id := range n.book.members() {
		if id == n.cfg.NodeID || id == skip {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		if err := n.postMember(ctx, id, req, nil); err != nil {
			n.cfg.Logger.Warn("cannot tell member of a membership change", "member", id, "op", req.Op, "about", req.ID, "err", err)
		}
		cancel()
	}
}

// openBook loads (or creates) the address book before Raft starts. A
// member with no Raft state, told the cluster exists, asks the members in
// cfg.Members whether it was added: if so, and it never joined before, it
// records the cluster's deployment ID and joins (durability.Book.Join).
func (n *Node) openBook() error {
	n.book = &book{dir: n.cfg.DataDir}
	b, ok, err := durability.ReadBook(n.cfg.DataDir)
	if err != nil {
		return err
	}
	if ok {
		// A restart (or a join that was interrupted: it joins again).
		n.book.b = b
		for id, e := range b.Members {
			if id != n.cfg.NodeID {
				n.peers.learn(id, e.Endpoint)
			}
		}
		return nil
	}
	n.book.b = durability.Book{TokenHash: durability.TokenHash(n.cfg.InitialClusterToken), Members: map[uint64]durability.BookEntry{}}
	for id, m := range n.cfg.Members {
		n.book.b.Members[id] = durability.BookEntry{RaftAddress: m.RaftAddress, Endpoint: m.Endpoint, Joined: true}
	}
	joining := len(n.cfg.Members) > 1 && n.cfg.InitialClusterState != ClusterStateNew && n.cfg.DataDir != "" &&
		!durability.HasRaftState(n.cfg.DataDir)
	if !joining {
		return nil // written once Raft runs (finishBook)
	}
	return n.prepareJoin()
}

// prepareJoin asks the other members whether this node was added and,
// if so, records the join in the book. Without an answer it leaves the
// book alone, and durability refuses the missing Raft state as a lost
// disk (ErrNoRaftState).
func (n *Node) prepareJoin() error {
	// A member reports the voters its own replicas have applied: one that
	// lags may not show this node in a partition whose change committed.
	// Ask the others, and again for a while, before calling it partial.
	deadline := time.Now().Add(joinSettle)
	for {
		err := n.prepareJoinOnce()
		var partial *partialJoinError
		if !errors.As(err, &partial) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond) // Raft state has no signal to wait on
	}
}

// joinSettle bounds how long prepareJoin waits for members to show every
// partition of an add that committed.
const joinSettle = 10 * time.Second

// partialJoinError: no member shows this node in every partition.
type partialJoinError struct {
	msg       string
	notMember bool // no member shows this node at all
}

func (e *partialJoinError) Error() string { return e.msg }

// Unwrap keeps "not a member" matching ErrNoRaftState.
func (e *partialJoinError) Unwrap() error {
	if e.notMember {
		return ErrNoRaftState
	}
	return nil
}

func (n *Node) prepareJoinOnce() error {
	var errs []error
	var partial error
	for _, id := range slices.Sorted(maps.Keys(n.cfg.Members)) {
		if id == n.cfg.NodeID {
			continue
		}
		v, err := n.fetchMembers(n.cfg.Members[id].Endpoint)
		if err != nil {
			errs = append(errs, fmt.Errorf("node %d: %w", id, err))
			continue
		}
		if slices.Contains(v.Removed, n.cfg.NodeID) {
			return fmt.Errorf("kahuna: open: %w (node %d says member %d was removed)", ErrMemberRemoved, id, n.cfg.NodeID)
		}
		var self *MemberInfo
		for i := range v.Members {
			if v.Members[i].ID == n.cfg.NodeID {
				self = &v.Members[i]
			}
		}
		switch {
		case self == nil || len(self.Partitions) == 0:
			if partial == nil {
				partial = &partialJoinError{msg: fmt.Sprintf("kahuna: open: %v: node %d is not a member of the cluster node %d belongs to: add it first (kahunactl member add %d --raft-address %s --endpoint %s), then start it",
					ErrNoRaftState, n.cfg.NodeID, id, n.cfg.NodeID, n.cfg.RaftAddress, n.cfg.Members[n.cfg.NodeID].Endpoint), notMember: true}
			}
			continue
		case self.Joined:
			n.cfg.Logger.Warn("this node's ID has joined the cluster before: its data dir was lost", "node", n.cfg.NodeID)
			return nil // durability refuses: a lost disk
		case self.RaftAddress != "" && self.RaftAddress != n.cfg.RaftAddress:
			return fmt.Errorf("kahuna: open: node %d was added with Raft address %s, not %s", n.cfg.NodeID, self.RaftAddress, n.cfg.RaftAddress)
		case len(self.Partitions) < n.cfg.Partitions:
			partial = &partialJoinError{msg: fmt.Sprintf("kahuna: open: node %d was added to partitions %v only of %d: run kahunactl member add again to finish, then start it", n.cfg.NodeID, self.Partitions, n.cfg.Partitions)}
			continue // another member may have applied more
		case v.TokenHash != n.book.b.TokenHash:
			return fmt.Errorf("kahuna: open: %w: node %d has another cluster token", ErrOtherCluster, id)
		}
		b := durability.Book{DeploymentID: v.DeploymentID, TokenHash: v.TokenHash, Join: true, Members: map[uint64]durability.BookEntry{}, Removed: v.Removed}
		for _, m := range v.Members {
			if m.Endpoint != "" {
				b.Members[m.ID] = durability.BookEntry{RaftAddress: m.RaftAddress, Endpoint: m.Endpoint, Joined: m.Joined}
			}
		}
		for mid, m := range n.cfg.Members { // the configured endpoints win
			e := b.Members[mid]
			e.RaftAddress, e.Endpoint = m.RaftAddress, m.Endpoint
			b.Members[mid] = e
		}
		n.book.b = b
		for mid, e := range b.Members {
			if mid != n.cfg.NodeID {
				n.peers.learn(mid, e.Endpoint)
			}
		}
		n.cfg.Logger.Info("joining the cluster", "node", n.cfg.NodeID, "asked", id, "deployment_id", v.DeploymentID)
		return durability.WriteBook(n.cfg.DataDir, b)
	}
	if partial != nil {
		return partial
	}
	n.cfg.Logger.Warn("no member answered: cannot tell whether this node was added", "err", errors.Join(errs...))
	return nil
}

func (n *Node) fetchMembers(endpoint string) (MembersView, error) {
	var v MembersView
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(endpoint, "/")+AdminMembersPath, nil)
	if err != nil {
		return v, err
	}
	authorizePeer(req, n.cfg.peerSecret())
	resp, err := n.adminHTTP.Do(req)
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return v, fmt.Errorf("GET %s: %s", AdminMembersPath, resp.Status)
	}
	return v, json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&v)
}

// finishBook records, once Raft runs, the deployment ID and this node as
// joined; a node that joined announces itself to the others.
func (n *Node) finishBook() {
	joined := false
	err := n.book.update(func(b *durability.Book) {
		b.DeploymentID = n.backend.DeploymentID()
		joined, b.Join = b.Join, false
		e := b.Members[n.cfg.NodeID]
		e.Joined = true
		if e.RaftAddress == "" {
			e.RaftAddress = n.cfg.RaftAddress
		}
		if m, ok := n.cfg.Members[n.cfg.NodeID]; ok {
			e.Endpoint = m.Endpoint
		}
		if n.cfg.RaftAddress != "" || len(b.Members) > 0 {
			b.Members[n.cfg.NodeID] = e
		}
	})
	if err != nil {
		n.cfg.Logger.Warn("cannot record the members", "err", err)
	}
	if joined {
		self, _ := n.book.get(n.cfg.NodeID)
		go n.tellAll(MemberRequest{ID: n.cfg.NodeID, RaftAddress: self.RaftAddress, Endpoint: self.Endpoint, Op: "joined"}, n.cfg.NodeID)
	}
}
