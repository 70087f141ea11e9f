package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/kahunago/kahuna/admin"
	"github.com/kahunago/kahuna/durability"
)

// Members calling members, through their admin API (package admin): a
// change passed on to a partition's leader, the others told of an added
// or removed member, and a new member asking whether it was added before
// it joins.

// forwardChange asks leader to apply ch to partitions ps, which it leads.
// A refusal for good (409) is an answer: its result says why.
func (ms *Members) forwardChange(ctx context.Context, leader uint64, ch memberChange, ps []int) (admin.MemberChangeResult, error) {
	m, ok := ms.Book.Get(leader)
	if !ok || m.Endpoint == "" {
		return admin.MemberChangeResult{}, fmt.Errorf("pass the change on to node %d (its leader): no endpoint known for node %d", leader, leader)
	}
	res, err := ms.Admin.AddMember(ctx, m.Endpoint, admin.MemberRequest{
		ID: ch.id, RaftAddress: ch.member.RaftAddress, Endpoint: ch.member.Endpoint, Op: ch.op, Partitions: ps,
	})
	var refused *admin.Error
	if errors.As(err, &refused) && refused.Code == http.StatusConflict && refused.Err == nil {
		err = nil
	}
	if err != nil {
		return res, fmt.Errorf("pass the change on to node %d (its leader): %w", leader, err)
	}
	return res, nil
}

// announce tells every other member known here (best effort) of an added
// member's endpoint or a removal, so their forwarding and address books
// follow. A member that misses it learns an added member's endpoint when
// that member joins (it announces itself).
func (ms *Members) announce(ch memberChange) {
	req := admin.MemberRequest{ID: ch.id, Op: "forget"}
	if ch.op == "add" {
		req = admin.MemberRequest{ID: ch.id, RaftAddress: ch.member.RaftAddress, Endpoint: ch.member.Endpoint, Op: "learn"}
	}
	ms.tellAll(req, ch.id)
}

// tellAll posts req to every other member known here but skip.
func (ms *Members) tellAll(req admin.MemberRequest, skip uint64) {
	for id, m := range ms.Book.Members() {
		if id == ms.Self || id == skip {
			continue
		}
		var err error
		if m.Endpoint == "" {
			err = fmt.Errorf("no endpoint known for node %d", id)
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			_, err = ms.Admin.AddMember(ctx, m.Endpoint, req)
			cancel()
		}
		if err != nil {
			ms.Logger.Warn("cannot tell member of a membership change", "member", id, "op", req.Op, "about", req.ID, "err", err)
		}
	}
}

// Join is what a node opening its data dir knows of the cluster, for
// its book and, on a new member, its join.
type Join struct {
	DataDir     string
	RaftAddress string
	Members     map[uint64]admin.Member // as configured, this node included
	// Existing: the cluster exists (InitialClusterState), so a member
	// without Raft state joins it.
	Existing  bool
	TokenHash string // of the configured cluster token (durability.TokenHash)
}

// OpenBook loads (or creates) the address book (ms.Book) before Raft
// starts. A member with no Raft state, told the cluster exists, asks the
// members in j.Members whether it was added: if so, and it never joined
// before, it records the cluster's deployment ID and joins
// (durability.Book.Join).
func (ms *Members) OpenBook(j Join) error {
	b, ok, err := durability.ReadBook(j.DataDir)
	if err != nil {
		return err
	}
	if ok {
		// A restart (or a join that was interrupted: it joins again).
		ms.Book = NewBook(j.DataDir, b)
		for id, e := range b.Members {
			if id != ms.Self {
				ms.Peers.Learn(id, e.Endpoint)
			}
		}
		return nil
	}
	b = durability.Book{TokenHash: j.TokenHash, Members: map[uint64]durability.BookEntry{}}
	for id, m := range j.Members {
		b.Members[id] = durability.BookEntry{RaftAddress: m.RaftAddress, Endpoint: m.Endpoint, Joined: true}
	}
	ms.Book = NewBook(j.DataDir, b)
	joining := len(j.Members) > 1 && j.Existing && j.DataDir != "" && !durability.HasRaftState(j.DataDir)
	if !joining {
		return nil // written once Raft runs (FinishBook)
	}
	return ms.prepareJoin(j)
}

// prepareJoin asks the other members whether this node was added and,
// if so, records the join in the book. Without an answer it leaves the
// book alone, and durability refuses the missing Raft state as a lost
// disk (ErrNoRaftState).
func (ms *Members) prepareJoin(j Join) error {
	// A member reports the voters its own replicas have applied: one that
	// lags may not show this node in a partition whose change committed.
	// Ask the others, and again for a while, before calling it partial.
	deadline := time.Now().Add(joinSettle)
	for {
		err := ms.prepareJoinOnce(j)
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
		return durability.ErrNoRaftState
	}
	return nil
}

func (ms *Members) prepareJoinOnce(j Join) error {
	var errs []error
	var partial error
	for _, id := range slices.Sorted(maps.Keys(j.Members)) {
		if id == ms.Self {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		v, err := ms.Admin.Members(ctx, j.Members[id].Endpoint)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("node %d: %w", id, err))
			continue
		}
		if slices.Contains(v.Removed, ms.Self) {
			return fmt.Errorf("kahuna: open: %w (node %d says member %d was removed)", ErrMemberRemoved, id, ms.Self)
		}
		var self *admin.MemberInfo
		for i := range v.Members {
			if v.Members[i].ID == ms.Self {
				self = &v.Members[i]
			}
		}
		switch {
		case self == nil || len(self.Partitions) == 0:
			if partial == nil {
				partial = &partialJoinError{msg: fmt.Sprintf("kahuna: open: %v: node %d is not a member of the cluster node %d belongs to: add it first (kahunactl member add %d --raft-address %s --endpoint %s), then start it",
					durability.ErrNoRaftState, ms.Self, id, ms.Self, j.RaftAddress, j.Members[ms.Self].Endpoint), notMember: true}
			}
			continue
		case self.Joined:
			ms.Logger.Warn("this node's ID has joined the cluster before: its data dir was lost", "node", ms.Self)
			return nil // durability refuses: a lost disk
		case self.RaftAddress != "" && self.RaftAddress != j.RaftAddress:
			return fmt.Errorf("kahuna: open: node %d was added with Raft address %s, not %s", ms.Self, self.RaftAddress, j.RaftAddress)
		case len(self.Partitions) < ms.Partitions:
			partial = &partialJoinError{msg: fmt.Sprintf("kahuna: open: node %d was added to partitions %v only of %d: run kahunactl member add again to finish, then start it", ms.Self, self.Partitions, ms.Partitions)}
			continue // another member may have applied more
		case v.TokenHash != j.TokenHash:
			return fmt.Errorf("kahuna: open: %w: node %d has another cluster token", durability.ErrOtherCluster, id)
		}
		b := durability.Book{DeploymentID: v.DeploymentID, TokenHash: v.TokenHash, Join: true, Members: map[uint64]durability.BookEntry{}, Removed: v.Removed}
		for _, m := range v.Members {
			if m.Endpoint != "" {
				b.Members[m.ID] = durability.BookEntry{RaftAddress: m.RaftAddress, Endpoint: m.Endpoint, Joined: m.Joined}
			}
		}
		for mid, m := range j.Members { // the configured endpoints win
			e := b.Members[mid]
			e.RaftAddress, e.Endpoint = m.RaftAddress, m.Endpoint
			b.Members[mid] = e
		}
		ms.Book = NewBook(j.DataDir, b)
		for mid, e := range b.Members {
			if mid != ms.Self {
				ms.Peers.Learn(mid, e.Endpoint)
			}
		}
		ms.Logger.Info("joining the cluster", "node", ms.Self, "asked", id, "deployment_id", v.DeploymentID)
		return durability.WriteBook(j.DataDir, b)
	}
	if partial != nil {
		return partial
	}
	ms.Logger.Warn("no member answered: cannot tell whether this node was added", "err", errors.Join(errs...))
	return nil
}

// FinishBook records, once Raft runs, the deployment ID and this node
// as joined; a node that joined announces itself to the others.
func (ms *Members) FinishBook(j Join, deploymentID uint64) {
	joined := false
	err := ms.Book.Update(func(b *durability.Book) {
		b.DeploymentID = deploymentID
		joined, b.Join = b.Join, false
		e := b.Members[ms.Self]
		e.Joined = true
		if e.RaftAddress == "" {
			e.RaftAddress = j.RaftAddress
		}
		if m, ok := j.Members[ms.Self]; ok {
			e.Endpoint = m.Endpoint
		}
		if j.RaftAddress != "" || len(b.Members) > 0 {
			b.Members[ms.Self] = e
		}
	})
	if err != nil {
		ms.Logger.Warn("cannot record the members", "err", err)
	}
	if joined {
		self, _ := ms.Book.Get(ms.Self)
		go ms.tellAll(admin.MemberRequest{ID: ms.Self, RaftAddress: self.RaftAddress, Endpoint: self.Endpoint, Op: "joined"}, ms.Self)
	}
}
