package node

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
func (n *Node) forwardChange(ctx context.Context, leader uint64, ch memberChange, ps []int) (admin.MemberChangeResult, error) {
	m, ok := n.book.get(leader)
	if !ok || m.Endpoint == "" {
		return admin.MemberChangeResult{}, fmt.Errorf("pass the change on to node %d (its leader): no endpoint known for node %d", leader, leader)
	}
	res, err := n.admin.AddMember(ctx, m.Endpoint, admin.MemberRequest{
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
func (n *Node) announce(ch memberChange) {
	req := admin.MemberRequest{ID: ch.id, Op: "forget"}
	if ch.op == "add" {
		req = admin.MemberRequest{ID: ch.id, RaftAddress: ch.member.RaftAddress, Endpoint: ch.member.Endpoint, Op: "learn"}
	}
	n.tellAll(req, ch.id)
}

// tellAll posts req to every other member known here but skip.
func (n *Node) tellAll(req admin.MemberRequest, skip uint64) {
	for id, m := range n.book.members() {
		if id == n.cfg.NodeID || id == skip {
			continue
		}
		var err error
		if m.Endpoint == "" {
			err = fmt.Errorf("no endpoint known for node %d", id)
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			_, err = n.admin.AddMember(ctx, m.Endpoint, req)
			cancel()
		}
		if err != nil {
			n.cfg.Logger.Warn("cannot tell member of a membership change", "member", id, "op", req.Op, "about", req.ID, "err", err)
		}
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
	joining := len(n.cfg.Members) > 1 && n.cfg.InitialClusterState != durability.ClusterStateNew && n.cfg.DataDir != "" &&
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
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		v, err := n.admin.Members(ctx, n.cfg.Members[id].Endpoint)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("node %d: %w", id, err))
			continue
		}
		if slices.Contains(v.Removed, n.cfg.NodeID) {
			return fmt.Errorf("kahuna: open: %w (node %d says member %d was removed)", ErrMemberRemoved, id, n.cfg.NodeID)
		}
		var self *admin.MemberInfo
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
		go n.tellAll(admin.MemberRequest{ID: n.cfg.NodeID, RaftAddress: self.RaftAddress, Endpoint: self.Endpoint, Op: "joined"}, n.cfg.NodeID)
	}
}
