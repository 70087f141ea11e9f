package node

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kahunago/kahuna/admin"
	"github.com/kahunago/kahuna/durability"
)

// Membership changes.
//
// Every member replicates every partition, so adding or removing a member
// is one Raft membership change per partition. AddMember and RemoveMember
// do them all, partition by partition, each proposed by that partition's
// leader: on a node that does not lead a partition the change is passed to
// its leader through the admin API, as leader transfers are. A partition
// whose change already applied is skipped, so a call that stopped half way
// (reported as an *admin.MembershipError naming what is done and what is
// left) is finished by calling it again.
//
// Why the leader leases stay sound. A lease (partition.LeaseFor) rests on
// "every quorum that can elect a rival contains a voter that acknowledged
// this leader's heartbeat after t0", and a membership change changes the
// quorums. So the leader of a partition, and only it, proposes the
// partition's change, and first drops its lease (partition.Leadership.
// Suspend: Serving is false from then on, renewals are off, and neither a
// renewal that was in flight nor a takeover in the same term can bring the
// lease back); only after the change has applied on the leader (or is
// known never to apply: rejected, dropped, or followed by a fence entry
// that applied after it) does it Resume, and its next lease comes from a
// read index started after that apply, whose quorum the leader counts in
// the new configuration. dragonboat allows one pending change per
// partition and Node passes every change through the leader, so no change
// is ever pending while a lease of the partition's leader is live, and
// every live lease was confirmed in the configuration in force for all of
// it. A new leader inherits at most the one change an earlier leader had
// pending; its fence entry follows that change in the log, so the change
// applies before the new leader serves, and the majorities of two
// configurations one member apart intersect, so the acknowledging quorum
// still meets every electing one. Assumption: membership is changed only
// through Node (AddMember, RemoveMember, the admin API, kahunactl), never
// with dragonboat's API directly.

// ErrMemberRemoved: the ID was removed from the cluster; Raft never lets a
// removed ID back (its log and votes are gone with it). Add the node under
// a new ID. It is the admin API's error, so either name matches it.
var ErrMemberRemoved = admin.ErrMemberRemoved

// errNoLeaderYet: a partition with no known leader (electing): retried.
var errNoLeaderYet = errors.New("no leader known (electing?)")

// membershipTimeout bounds AddMember and RemoveMember when ctx has no
// deadline.
const membershipTimeout = time.Minute

// memberChange is one membership change, as passed between nodes.
type memberChange struct {
	op     string // "add" or "remove"
	id     uint64
	member admin.Member // add only
}

// AddMember adds node id, reachable at m, to every partition as a voter.
// Then start the new node with InitialClusterState ClusterStateExisting
// (kahuna --initial-cluster-state existing) and Members listing the
// cluster, itself included: it joins and catches up from the others by
// snapshot and log. Adding an ID that is already a member with the same
// Raft address does nothing; a removed ID is refused (ErrMemberRemoved).
// Until the new node runs, it counts in every quorum without answering:
// start it promptly, and add one node at a time.
func (n *Node) AddMember(ctx context.Context, id uint64, m admin.Member) error {
	if err := n.canChangeMembers(); err != nil {
		return err
	}
	if id == 0 {
		return errors.New("kahuna: member ID 0 is not allowed")
	}
	if m.RaftAddress == "" {
		return fmt.Errorf("kahuna: member %d has no RaftAddress", id)
	}
	if u, err := url.Parse(m.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("kahuna: member %d: Endpoint %q is not an http:// or https:// URL", id, m.Endpoint)
	}
	if n.book.removed(id) {
		return fmt.Errorf("%w (member %d)", ErrMemberRemoved, id)
	}
	if cur, ok := n.book.get(id); ok && cur.RaftAddress != m.RaftAddress {
		return fmt.Errorf("kahuna: member %d is already in the cluster at Raft address %s, not %s", id, cur.RaftAddress, m.RaftAddress)
	}
	n.learn(id, m, false)
	err := n.changeMembers(ctx, memberChange{op: "add", id: id, member: m})
	n.announce(memberChange{op: "add", id: id, member: m})
	return err
}

// RemoveMember removes node id from every partition. A live node that is
// removed stops its replicas as it applies its removal: shut it down
// afterwards. Removing an ID that was removed before does nothing; an ID
// that is not a member and never was one is refused (admin.ErrNotMember),
// since a removal bans the ID for good and a typo must not cost one. The
// ID can never be added back. The remaining members must still form a
// quorum of the new membership to serve.
func (n *Node) RemoveMember(ctx context.Context, id uint64) error {
	if err := n.canChangeMembers(); err != nil {
		return err
	}
	if id == 0 {
		return errors.New("kahuna: member ID 0 is not allowed")
	}
	if n.book.removed(id) {
		return nil
	}
	if _, known := n.book.get(id); !known {
		// Not in the address book: still a member if some partition has it
		// as a voter (a book that lags a change made elsewhere).
		voter, err := n.anyVoter(ctx, id)
		if err != nil {
			return fmt.Errorf("kahuna: remove member %d: reading the membership: %w", id, err)
		}
		if !voter {
			return fmt.Errorf("kahuna: member %d: %w (members: %s); nothing removed", id, admin.ErrNotMember, memberIDs(n.book.members()))
		}
	}
	err := n.changeMembers(ctx, memberChange{op: "remove", id: id})
	if err == nil {
		n.unlearn(id)
		n.announce(memberChange{op: "remove", id: id})
	}
	return err
}

// anyVoter reports whether id is a voter of any partition.
func (n *Node) anyVoter(ctx context.Context, id uint64) (bool, error) {
	for p := 0; p < n.cfg.Partitions; p++ {
		m, err := n.backend.Membership(ctx, p)
		if err != nil {
			return false, err
		}
		if _, ok := m.Voters[id]; ok {
			return true, nil
		}
	}
	return false, nil
}

// memberIDs lists the IDs of ms in order, for messages.
func memberIDs(ms map[uint64]admin.Member) string {
	ids := slices.Sorted(maps.Keys(ms))
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.FormatUint(id, 10)
	}
	return strings.Join(s, ", ")
}

// Members returns the cluster's members as this node knows them (its
// address book: Raft addresses and endpoints), this node included.
func (n *Node) Members() map[uint64]admin.Member {
	return n.book.members()
}

func (n *Node) canChangeMembers() error {
	switch {
	case n.closing.Load():
		return ErrClosed
	case n.leaderLease() == 0:
		// Leadership was set up without a lease (no one else could be
		// elected); a second voter would make that unsafe.
		return errors.New("kahuna: a node started as a single node cannot take members: found a cluster (Members with every node) instead")
	case n.cfg.RaftAddress == "":
		return errors.New("kahuna: this node has no Raft address other nodes can reach")
	}
	return nil
}

// changeMembers applies ch to every partition: here where this node leads,
// through the leader elsewhere, in rounds until all are done, a partition
// refuses for good, or ctx ends.
func (n *Node) changeMembers(ctx context.Context, ch memberChange) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, membershipTimeout)
		defer cancel()
	}
	done := map[int]bool{}
	for {
		left := map[int]error{}
		byLeader := map[uint64][]int{}
		for p := 0; p < n.cfg.Partitions; p++ {
			if done[p] {
				continue
			}
			leader, self := n.leadership.LeaderOf(p)
			switch {
			case self:
				if err := n.changeHere(ctx, p, ch); err != nil {
					left[p] = err
				} else {
					done[p] = true
				}
			case leader == 0:
				left[p] = errNoLeaderYet
			default:
				byLeader[leader] = append(byLeader[leader], p)
			}
		}
		for leader, ps := range byLeader {
			res, err := n.forwardChange(ctx, leader, ch, ps)
			for _, p := range ps {
				switch why, failed := res.Left[p]; {
				case err != nil:
					left[p] = err
				case failed:
					left[p] = errors.New(why)
					if res.Removed {
						left[p] = fmt.Errorf("%w (member %d, partition %d)", ErrMemberRemoved, ch.id, p)
					}
				case slices.Contains(res.Done, p):
					done[p] = true
				default:
					left[p] = fmt.Errorf("node %d did not answer for it", leader)
				}
			}
		}
		if len(left) == 0 {
			return nil
		}
		permanent := false
		for _, err := range left {
			if errors.Is(err, ErrMemberRemoved) || errors.Is(err, admin.ErrMemberConflict) {
				permanent = true
			}
		}
		if !permanent {
			select {
			case <-time.After(50 * time.Millisecond):
				continue
			case <-ctx.Done():
			}
		}
		e := &admin.MembershipError{Op: ch.op, ID: ch.id, Left: left}
		for p := range done {
			e.Done = append(e.Done, p)
		}
		sort.Ints(e.Done)
		return e
	}
}

// configChangeTimeout bounds one partition's change.
const configChangeTimeout = 10 * time.Second

// changeHere applies ch to partition p, which this node must lead: the
// safety argument is at the top of this file. It returns nil if the
// change is applied (now or before).
func (n *Node) changeHere(ctx context.Context, p int, ch memberChange) error {
	ctx, cancel := context.WithTimeout(ctx, configChangeTimeout)
	defer cancel()
	m, err := n.backend.Membership(ctx, p)
	if err != nil {
		return err
	}
	switch addr, voter := m.Voters[ch.id]; {
	case ch.op == "add" && m.Removed[ch.id]:
		return fmt.Errorf("%w (member %d, partition %d)", ErrMemberRemoved, ch.id, p)
	case ch.op == "add" && voter && addr == ch.member.RaftAddress:
		return nil // done before
	case ch.op == "add" && voter:
		return fmt.Errorf("%w: %d is at %s", admin.ErrMemberConflict, ch.id, addr)
	case ch.op == "remove" && !voter:
		return nil // done before (or never a member)
	case ch.op == "remove" && ch.id == n.cfg.NodeID:
		// A leader does not propose its own removal: hand p to another
		// voter, which will (the caller retries).
		for _, to := range slices.Sorted(maps.Keys(m.Voters)) {
			if to != ch.id {
				if err := n.transfer(p, to); err != nil {
					return err
				}
				return fmt.Errorf("partition %d led by the member being removed: handing it to node %d first", p, to)
			}
		}
		return errors.New("cannot remove the only member")
	}
	term, ok := n.leadership.Suspend(p)
	if !ok {
		leader, _ := n.leadership.LeaderOf(p)
		return &NotLeaderError{Partition: p, Leader: leader}
	}
	resume := true
	defer func() {
		if resume {
			n.leadership.Resume(p, term)
		}
	}()
	if !n.backend.Leads(p, term) {
		return &NotLeaderError{Partition: p}
	}
	n.configChangeHook(p, "proposing")
	if ch.op == "add" {
		err = n.backend.AddReplica(ctx, p, ch.id, ch.member.RaftAddress, m.ConfigChangeID)
	} else {
		err = n.backend.DeleteReplica(ctx, p, ch.id, m.ConfigChangeID)
	}
	if err != nil && !errors.Is(err, durability.ErrConfigChangeNotApplied) {
		// The change may still apply: a fence entry of this term applies
		// after it, if it is in the log at all. Until one does, no lease.
		fctx, fcancel := context.WithTimeout(context.Background(), configChangeTimeout)
		ferr := n.backend.Fence(fctx, p, term)
		fcancel()
		if ferr != nil {
			resume = false // the lease stays off for the rest of this term
			n.cfg.Logger.Warn("membership change of unknown outcome; partition unserved here until its next term", "partition", p, "err", err, "fence", ferr)
			if to := n.otherVoter(m, ch); to != 0 {
				_ = n.backend.TransferLeadership(p, to)
			}
		}
	}
	n.configChangeHook(p, "applied")
	if err != nil {
		return err
	}
	n.cfg.Logger.Info("membership changed", "partition", p, "op", ch.op, "member", ch.id)
	return nil
}

// otherVoter is a voter of m other than this node and ch's member.
func (n *Node) otherVoter(m durability.Membership, ch memberChange) uint64 {
	for _, id := range slices.Sorted(maps.Keys(m.Voters)) {
		if id != n.cfg.NodeID && id != ch.id {
			return id
		}
	}
	return 0
}

// configChangeHook calls the test hook, if any (SetConfigChangeHook).
func (n *Node) configChangeHook(p int, phase string) {
	if f := n.ccHook.Load(); f != nil {
		(*f)(p, phase)
	}
}

// learn records member id in the address book and the forwarding peers.
func (n *Node) learn(id uint64, m admin.Member, joined bool) {
	if err := n.book.set(id, m, joined); err != nil {
		n.cfg.Logger.Warn("cannot record member", "member", id, "err", err)
	}
	if id != n.cfg.NodeID {
		n.peers.learn(id, m.Endpoint)
	}
}

// unlearn records the removal of member id.
func (n *Node) unlearn(id uint64) {
	if err := n.book.remove(id); err != nil {
		n.cfg.Logger.Warn("cannot record member removal", "member", id, "err", err)
	}
	n.peers.forget(id)
}

// book is a node's address book of members (durability.Book), kept in
// DataDir/membership.json so a restart knows the members added since the
// start, their endpoints, and the removed IDs.
type book struct {
	dir string
	mu  sync.Mutex
	b   durability.Book
}

func (b *book) get(id uint64) (admin.Member, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.b.Members[id]
	return admin.Member{RaftAddress: e.RaftAddress, Endpoint: e.Endpoint}, ok
}

func (b *book) removed(id uint64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Contains(b.b.Removed, id)
}

func (b *book) members() map[uint64]admin.Member {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[uint64]admin.Member, len(b.b.Members))
	for id, e := range b.b.Members {
		out[id] = admin.Member{RaftAddress: e.RaftAddress, Endpoint: e.Endpoint}
	}
	return out
}

func (b *book) snapshot() durability.Book {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.b
	c.Members = maps.Clone(b.b.Members)
	c.Removed = slices.Clone(b.b.Removed)
	return c
}

func (b *book) set(id uint64, m admin.Member, joined bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.b.Members[id]
	e2 := durability.BookEntry{RaftAddress: m.RaftAddress, Endpoint: m.Endpoint, Joined: e.Joined || joined}
	if e == e2 {
		return nil
	}
	b.b.Members[id] = e2
	return durability.WriteBook(b.dir, b.b)
}

func (b *book) remove(id uint64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, was := b.b.Members[id]
	if !was && slices.Contains(b.b.Removed, id) {
		return nil
	}
	delete(b.b.Members, id)
	if !slices.Contains(b.b.Removed, id) {
		b.b.Removed = append(b.b.Removed, id)
		slices.Sort(b.b.Removed)
	}
	return durability.WriteBook(b.dir, b.b)
}

func (b *book) update(f func(*durability.Book)) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	f(&b.b)
	return durability.WriteBook(b.dir, b.b)
}
