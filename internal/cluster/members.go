package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	"github.com/kahunago/kahuna/partition"
)

// Membership changes.
//
// Every member replicates every partition, so adding or removing a member
// is one Raft membership change per partition. Members.Add and
// Members.Remove do them all, partition by partition, each proposed by
// that partition's leader: on a node that does not lead a partition the
// change is passed to its leader through the admin API, as leader
// transfers are. A partition
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
// through Members (the node's AddMember and RemoveMember, the admin API,
// kahunactl), never with dragonboat's API directly.

// ErrMemberRemoved: the ID was removed from the cluster; Raft never lets a
// removed ID back (its log and votes are gone with it). Add the node under
// a new ID. It is the admin API's error, so either name matches it.
var ErrMemberRemoved = admin.ErrMemberRemoved

// errNoLeaderYet: a partition with no known leader (electing): retried.
var errNoLeaderYet = errors.New("no leader known (electing?)")

// membershipTimeout bounds Members.Add and Members.Remove when ctx has no
// deadline.
const membershipTimeout = time.Minute

// memberChange is one membership change, as passed between nodes.
type memberChange struct {
	op     string // "add" or "remove"
	id     uint64
	member admin.Member // add only
}

// Raft is the node's Raft as membership changes use it (*durability.Raft).
type Raft interface {
	Membership(ctx context.Context, p int) (durability.Membership, error)
	AddReplica(ctx context.Context, p int, id uint64, addr string, ccid uint64) error
	DeleteReplica(ctx context.Context, p int, id uint64, ccid uint64) error
	// Fence commits a fence entry of term in p: what was proposed before it
	// has applied, or never will.
	Fence(ctx context.Context, p int, term uint64) error
	Leads(p int, term uint64) bool
	TransferLeadership(p int, to uint64) error
}

// Peers are the node's forwarding clients, which follow the book.
type Peers interface {
	Learn(id uint64, endpoint string)
	Forget(id uint64)
}

// MemberNode is what membership changes need of the node besides its
// parts.
type MemberNode interface {
	// CanChangeMembers says why the node cannot change the membership now
	// (closing, started as a single node, no Raft address), or nil.
	CanChangeMembers() error
	// Transfer hands partition p, which the node leads, to member to, its
	// lease dropped first (a *NotLeaderError where it does not lead p).
	Transfer(p int, to uint64) error
	// ConfigChangeHook is called as a change of p is proposed and as it
	// applied (tests).
	ConfigChangeHook(p int, phase string)
}

// Members changes and keeps a node's cluster membership: see the top of
// the file. It is handed the node's parts.
type Members struct {
	Self       uint64
	Partitions int
	Leadership *partition.Leadership
	Raft       Raft
	Admin      *admin.Client // to other members: changes passed on, members told
	Book       *Book
	Peers      Peers
	Logger     *slog.Logger
	Node       MemberNode
}

// Add adds node id, reachable at m, to every partition as a voter.
// Then start the new node with InitialClusterState ClusterStateExisting
// (kahuna --initial-cluster-state existing) and Members listing the
// cluster, itself included: it joins and catches up from the others by
// snapshot and log. Adding an ID that is already a member with the same
// Raft address does nothing; a removed ID is refused (ErrMemberRemoved).
// Until the new node runs, it counts in every quorum without answering:
// start it promptly, and add one node at a time.
func (ms *Members) Add(ctx context.Context, id uint64, m admin.Member) error {
	if err := ms.Node.CanChangeMembers(); err != nil {
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
	if ms.Book.Removed(id) {
		return fmt.Errorf("%w (member %d)", ErrMemberRemoved, id)
	}
	if cur, ok := ms.Book.Get(id); ok && cur.RaftAddress != m.RaftAddress {
		return fmt.Errorf("kahuna: member %d is already in the cluster at Raft address %s, not %s", id, cur.RaftAddress, m.RaftAddress)
	}
	ms.Learn(id, m, false)
	err := ms.change(ctx, memberChange{op: "add", id: id, member: m})
	ms.announce(memberChange{op: "add", id: id, member: m})
	return err
}

// Remove removes node id from every partition. A live node that is
// removed stops its replicas as it applies its removal: shut it down
// afterwards. Removing an ID that was removed before does nothing; an ID
// that is not a member and never was one is refused (admin.ErrNotMember),
// since a removal bans the ID for good and a typo must not cost one. The
// ID can never be added back. The remaining members must still form a
// quorum of the new membership to serve.
func (ms *Members) Remove(ctx context.Context, id uint64) error {
	if err := ms.Node.CanChangeMembers(); err != nil {
		return err
	}
	if id == 0 {
		return errors.New("kahuna: member ID 0 is not allowed")
	}
	if ms.Book.Removed(id) {
		return nil
	}
	if _, known := ms.Book.Get(id); !known {
		// Not in the address book: still a member if some partition has it
		// as a voter (a book that lags a change made elsewhere).
		voter, err := ms.anyVoter(ctx, id)
		if err != nil {
			return fmt.Errorf("kahuna: remove member %d: reading the membership: %w", id, err)
		}
		if !voter {
			return fmt.Errorf("kahuna: member %d: %w (members: %s); nothing removed", id, admin.ErrNotMember, memberIDs(ms.Book.Members()))
		}
	}
	err := ms.change(ctx, memberChange{op: "remove", id: id})
	if err == nil {
		ms.Unlearn(id)
		ms.announce(memberChange{op: "remove", id: id})
	}
	return err
}

// anyVoter reports whether id is a voter of any partition.
func (ms *Members) anyVoter(ctx context.Context, id uint64) (bool, error) {
	for p := 0; p < ms.Partitions; p++ {
		m, err := ms.Raft.Membership(ctx, p)
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

// change applies ch to every partition: here where this node leads,
// through the leader elsewhere, in rounds until all are done, a partition
// refuses for good, or ctx ends.
func (ms *Members) change(ctx context.Context, ch memberChange) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, membershipTimeout)
		defer cancel()
	}
	done := map[int]bool{}
	for {
		left := map[int]error{}
		byLeader := map[uint64][]int{}
		for p := 0; p < ms.Partitions; p++ {
			if done[p] {
				continue
			}
			leader, self := ms.Leadership.LeaderOf(p)
			switch {
			case self:
				if err := ms.changeHere(ctx, p, ch); err != nil {
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
			res, err := ms.forwardChange(ctx, leader, ch, ps)
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
func (ms *Members) changeHere(ctx context.Context, p int, ch memberChange) error {
	ctx, cancel := context.WithTimeout(ctx, configChangeTimeout)
	defer cancel()
	m, err := ms.Raft.Membership(ctx, p)
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
	case ch.op == "remove" && ch.id == ms.Self:
		// A leader does not propose its own removal: hand p to another
		// voter, which will (the caller retries).
		for _, to := range slices.Sorted(maps.Keys(m.Voters)) {
			if to != ch.id {
				if err := ms.Node.Transfer(p, to); err != nil {
					return err
				}
				return fmt.Errorf("partition %d led by the member being removed: handing it to node %d first", p, to)
			}
		}
		return errors.New("cannot remove the only member")
	}
	term, ok := ms.Leadership.Suspend(p)
	if !ok {
		leader, _ := ms.Leadership.LeaderOf(p)
		return &NotLeaderError{Partition: p, Leader: leader}
	}
	resume := true
	defer func() {
		if resume {
			ms.Leadership.Resume(p, term)
		}
	}()
	if !ms.Raft.Leads(p, term) {
		return &NotLeaderError{Partition: p}
	}
	ms.Node.ConfigChangeHook(p, "proposing")
	if ch.op == "add" {
		err = ms.Raft.AddReplica(ctx, p, ch.id, ch.member.RaftAddress, m.ConfigChangeID)
	} else {
		err = ms.Raft.DeleteReplica(ctx, p, ch.id, m.ConfigChangeID)
	}
	if err != nil && !errors.Is(err, durability.ErrConfigChangeNotApplied) {
		// The change may still apply: a fence entry of this term applies
		// after it, if it is in the log at all. Until one does, no lease.
		fctx, fcancel := context.WithTimeout(context.Background(), configChangeTimeout)
		ferr := ms.Raft.Fence(fctx, p, term)
		fcancel()
		if ferr != nil {
			resume = false // the lease stays off for the rest of this term
			ms.Logger.Warn("membership change of unknown outcome; partition unserved here until its next term", "partition", p, "err", err, "fence", ferr)
			if to := ms.otherVoter(m, ch); to != 0 {
				_ = ms.Raft.TransferLeadership(p, to)
			}
		}
	}
	ms.Node.ConfigChangeHook(p, "applied")
	if err != nil {
		return err
	}
	ms.Logger.Info("membership changed", "partition", p, "op", ch.op, "member", ch.id)
	return nil
}

// otherVoter is a voter of m other than this node and ch's member.
func (ms *Members) otherVoter(m durability.Membership, ch memberChange) uint64 {
	for _, id := range slices.Sorted(maps.Keys(m.Voters)) {
		if id != ms.Self && id != ch.id {
			return id
		}
	}
	return 0
}

// Learn records member id in the book and the forwarding peers; joined
// marks a member that has run (a new member announcing itself).
func (ms *Members) Learn(id uint64, m admin.Member, joined bool) {
	if err := ms.Book.Set(id, m, joined); err != nil {
		ms.Logger.Warn("cannot record member", "member", id, "err", err)
	}
	if id != ms.Self {
		ms.Peers.Learn(id, m.Endpoint)
	}
}

// Unlearn records the removal of member id.
func (ms *Members) Unlearn(id uint64) {
	if err := ms.Book.Remove(id); err != nil {
		ms.Logger.Warn("cannot record member removal", "member", id, "err", err)
	}
	ms.Peers.Forget(id)
}

// Serve serves another member's request (admin.Node.PeerChange): a
// member it tells of, or a change of partitions this node leads (a
// change on that member sent them here).
func (ms *Members) Serve(ctx context.Context, req admin.MemberRequest) (admin.MemberChangeResult, error) {
	m := admin.Member{RaftAddress: req.RaftAddress, Endpoint: req.Endpoint}
	switch req.Op {
	case "learn", "joined":
		if !ms.Book.Removed(req.ID) {
			ms.Learn(req.ID, m, req.Op == "joined")
		}
		return admin.MemberChangeResult{}, nil
	case "forget":
		ms.Unlearn(req.ID)
		return admin.MemberChangeResult{}, nil
	}
	if err := ms.Node.CanChangeMembers(); err != nil {
		return admin.MemberChangeResult{}, err
	}
	if req.Op == "add" {
		if ms.Book.Removed(req.ID) {
			return admin.MemberChangeResult{}, ErrMemberRemoved
		}
		ms.Learn(req.ID, m, false)
	}
	ch := memberChange{op: req.Op, id: req.ID, member: m}
	res := admin.MemberChangeResult{Op: req.Op, ID: req.ID, Done: []int{}, Left: map[int]string{}}
	for _, p := range req.Partitions {
		if p < 0 || p >= ms.Partitions {
			res.Left[p] = "no such partition"
			continue
		}
		if err := ms.changeHere(ctx, p, ch); err != nil {
			res.Left[p] = err.Error()
			if errors.Is(err, ErrMemberRemoved) {
				res.Removed = true
			}
			continue
		}
		res.Done = append(res.Done, p)
	}
	return res, nil
}

// NotLeaderError is returned by a transfer, or a membership change, on a
// node that does not serve the partition: only its leader may hand it
// over or change it.
type NotLeaderError struct {
	Partition int
	Leader    uint64 // 0 if none is known
}

func (e *NotLeaderError) Error() string {
	if e.Leader == 0 {
		return fmt.Sprintf("kahuna: partition %d has no serving leader here (electing?); retry", e.Partition)
	}
	return fmt.Sprintf("kahuna: this node does not serve partition %d; its leader is node %d", e.Partition, e.Leader)
}

// Book is a node's address book of members (durability.Book), kept in
// DataDir/membership.json so a restart knows the members added since the
// start, their endpoints, and the removed IDs.
type Book struct {
	dir string
	mu  sync.Mutex
	b   durability.Book
}

// NewBook is the book b of data dir dir (not written until changed).
func NewBook(dir string, b durability.Book) *Book { return &Book{dir: dir, b: b} }

func (b *Book) Get(id uint64) (admin.Member, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.b.Members[id]
	return admin.Member{RaftAddress: e.RaftAddress, Endpoint: e.Endpoint}, ok
}

func (b *Book) Removed(id uint64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Contains(b.b.Removed, id)
}

func (b *Book) Members() map[uint64]admin.Member {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[uint64]admin.Member, len(b.b.Members))
	for id, e := range b.b.Members {
		out[id] = admin.Member{RaftAddress: e.RaftAddress, Endpoint: e.Endpoint}
	}
	return out
}

func (b *Book) Snapshot() durability.Book {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.b
	c.Members = maps.Clone(b.b.Members)
	c.Removed = slices.Clone(b.b.Removed)
	return c
}

func (b *Book) Set(id uint64, m admin.Member, joined bool) error {
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

func (b *Book) Remove(id uint64) error {
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

func (b *Book) Update(f func(*durability.Book)) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	f(&b.b)
	return durability.WriteBook(b.dir, b.b)
}
