package durability

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/lni/dragonboat/v4"
)

// Membership is a partition's Raft membership: its voters and the replica
// IDs removed from it, which can never come back (dragonboat refuses to
// add them again).
type Membership struct {
	// ConfigChangeID is the Raft index of the last applied membership
	// change; a change must carry it (OrderedConfigChange semantics).
	ConfigChangeID uint64
	Voters         map[uint64]string // replica ID → Raft address
	Removed        map[uint64]bool
}

// Membership reads partition p's membership linearizably (a read index:
// any replica may answer, the leader confirms it with a quorum).
func (r *Raft) Membership(ctx context.Context, p int) (Membership, error) {
	if err := r.checkPartition(p); err != nil {
		return Membership{}, err
	}
	ctx, cancel := r.withDeadline(ctx)
	defer cancel()
	m, err := r.nh.SyncGetShardMembership(ctx, shardID(p))
	if err != nil {
		return Membership{}, fmt.Errorf("durability: membership of partition %d: %w", p, proposeError(err))
	}
	out := Membership{ConfigChangeID: m.ConfigChangeID, Voters: map[uint64]string{}, Removed: map[uint64]bool{}}
	for id, addr := range m.Nodes {
		out.Voters[id] = addr
	}
	for id := range m.Removed {
		out.Removed[id] = true
	}
	return out, nil
}

func (r *Raft) withDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, r.cfg.ProposalTimeout)
}

// ErrConfigChangeNotApplied wraps a membership change that certainly did
// not apply (not proposed, dropped, or rejected by Raft: a stale
// config-change ID, a removed or existing replica ID). Any other error of
// AddReplica or DeleteReplica leaves the outcome unknown: the change may
// still apply.
var ErrConfigChangeNotApplied = errors.New("durability: membership change not applied")

// AddReplica adds voter id at Raft address addr to partition p, given the
// partition's current ConfigChangeID (Membership). It returns nil once the
// change is applied on this node. The caller must be p's leader and must
// have stopped serving from its leader lease (partition.Leadership.Suspend):
// a change of membership changes what a quorum is.
func (r *Raft) AddReplica(ctx context.Context, p int, id uint64, addr string, ccid uint64) error {
	if err := r.checkPartition(p); err != nil {
		return err
	}
	rs, err := r.nh.RequestAddReplica(shardID(p), id, addr, ccid, r.changeTimeout(ctx))
	return r.awaitChange(ctx, rs, err, p, fmt.Sprintf("add replica %d (%s) to", id, addr))
}

// DeleteReplica removes replica id from partition p, as AddReplica adds
// one (same contract). A replica that applies its own removal stops.
func (r *Raft) DeleteReplica(ctx context.Context, p int, id uint64, ccid uint64) error {
	if err := r.checkPartition(p); err != nil {
		return err
	}
	rs, err := r.nh.RequestDeleteReplica(shardID(p), id, ccid, r.changeTimeout(ctx))
	return r.awaitChange(ctx, rs, err, p, fmt.Sprintf("remove replica %d from", id))
}

func (r *Raft) changeTimeout(ctx context.Context) time.Duration {
	timeout := r.cfg.ProposalTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	return max(timeout, r.cfg.RTT)
}

func (r *Raft) awaitChange(ctx context.Context, rs *dragonboat.RequestState, err error, p int, what string) error {
	if err != nil {
		return fmt.Errorf("durability: %s partition %d: %w (%w)", what, p, ErrConfigChangeNotApplied, err)
	}
	defer rs.Release()
	select {
	case res := <-rs.ResultC():
		switch {
		case res.Completed():
			return nil
		case res.Rejected(), res.Dropped():
			return fmt.Errorf("durability: %s partition %d: %w (%w)", what, p, ErrConfigChangeNotApplied, r.lanes[p].resultError(res))
		}
		return fmt.Errorf("durability: %s partition %d: %w (%w)", what, p, ErrUnknownOutcome, r.lanes[p].resultError(res))
	case <-ctx.Done():
		return fmt.Errorf("durability: %s partition %d: %w (%w)", what, p, ErrUnknownOutcome, ctx.Err())
	case <-r.stop:
		return fmt.Errorf("durability: %s partition %d: %w (%w)", what, p, ErrUnknownOutcome, ErrClosed)
	}
}

// PartitionStatus is one partition as this node sees it now, without
// asking anyone (for status displays: it may be stale; dragonboat
// refreshes the voters it reports here every few ticks).
type PartitionStatus struct {
	Partition         int
	Leader            uint64 // 0: none known
	Term              uint64
	Applied           uint64 // Raft index applied to the local state machine
	ConfigChangeIndex uint64
	Voters            []uint64 // sorted
	Running           bool     // this node runs a replica of the partition
}

// Status reports every partition as this node sees it.
func (r *Raft) Status() []PartitionStatus {
	out := make([]PartitionStatus, len(r.lanes))
	for p := range out {
		out[p].Partition = p
	}
	if r.closing.Load() {
		return out
	}
	info := r.nh.GetNodeHostInfo(dragonboat.NodeHostInfoOption{SkipLogInfo: true})
	for _, si := range info.ShardInfoList {
		p := int(si.ShardID) - 1
		if p < 0 || p >= len(out) {
			continue
		}
		s := &out[p]
		s.Running, s.Leader, s.Term, s.ConfigChangeIndex = true, si.LeaderID, si.Term, si.ConfigChangeIndex
		if ev := r.leaders[p].Load(); ev != nil && ev.Term >= s.Term {
			s.Leader, s.Term = ev.LeaderID, ev.Term // fresher than dragonboat's cached ShardInfo
		}
		for id := range si.Replicas {
			s.Voters = append(s.Voters, id)
		}
		slices.Sort(s.Voters)
	}
	r.dbMu.RLock()
	defer r.dbMu.RUnlock()
	if r.dbClosed {
		return out
	}
	for p := range out {
		if m := r.machine(p); m != nil {
			out[p].Applied = m.applied.Load()
		} else {
			out[p].Applied, _ = readApplied(view{db: r.db}, shardID(p))
		}
	}
	return out
}

// DeploymentID is the Raft deployment ID this node runs with: every member
// of a cluster has the same one, and a node joining a cluster must be
// given it (Book.DeploymentID).
func (r *Raft) DeploymentID() uint64 { return r.cfg.deploymentID }

// Book is a node's record of the cluster's members, kept in
// Dir/membership.json. Raft keeps each partition's membership itself (IDs
// and Raft addresses, replicated with the log); what it does not know is
// each member's API endpoint, which forwarding needs, and the deployment
// ID a cluster keeps when its member list changes (it is a hash of the
// founding members, so after a change it is no longer derivable from the
// current ones). The book is local, written by the node (kahuna.Node),
// and read by OpenRaft before Raft starts:
//   - DeploymentID, when set, is used instead of the one derived from the
//     configured members and token (TokenHash must still match the token);
//   - Join makes a partition without Raft state start by joining (empty
//     members, join=true: the replica was added by a member first).
//
// A file rather than a badger key because it is needed before Raft (and
// so before the state machines) starts, and so that an operator can read
// it.
type Book struct {
	DeploymentID uint64               `json:"deployment_id"`
	TokenHash    string               `json:"token_hash"`
	Join         bool                 `json:"join,omitempty"`
	Members      map[uint64]BookEntry `json:"members"`
	Removed      []uint64             `json:"removed,omitempty"`
}

// BookEntry is one member in a Book.
type BookEntry struct {
	RaftAddress string `json:"raft_address"`
	Endpoint    string `json:"endpoint"`
	// Joined: the member has started with its replicas (a founding member,
	// or a joined one that announced itself). A joined ID coming back with
	// no Raft state has lost its disk and must not join again.
	Joined bool `json:"joined,omitempty"`
}

// BookFile is the name of the Book in a data dir.
const BookFile = "membership.json"

// TokenHash is how a Book records a cluster token.
func TokenHash(token string) string {
	h := sha256.Sum256([]byte("kahuna token\x00" + token))
	return hex.EncodeToString(h[:8])
}

// ReadBook reads the Book in dir; ok is false if there is none.
func ReadBook(dir string) (b Book, ok bool, err error) {
	if dir == "" {
		return Book{}, false, nil
	}
	data, err := os.ReadFile(filepath.Join(dir, BookFile))
	if errors.Is(err, fs.ErrNotExist) {
		return Book{}, false, nil
	}
	if err == nil {
		err = json.Unmarshal(data, &b)
	}
	if err != nil {
		return Book{}, false, fmt.Errorf("durability: read %s in %s: %w", BookFile, dir, err)
	}
	if b.Members == nil {
		b.Members = map[uint64]BookEntry{}
	}
	return b, true, nil
}

// WriteBook replaces the Book in dir atomically and durably.
func WriteBook(dir string, b Book) error {
	if dir == "" {
		return nil
	}
	data, err := json.MarshalIndent(b, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, BookFile+".tmp")
	f, err := os.Create(tmp)
	if err == nil {
		_, err = f.Write(append(data, '\n'))
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, BookFile))
	}
	if err == nil {
		var d *os.File
		if d, err = os.Open(dir); err == nil {
			err = d.Sync()
			d.Close()
		}
	}
	if err != nil {
		return fmt.Errorf("durability: write %s in %s: %w", BookFile, dir, err)
	}
	return nil
}

// settleBook applies the Book in the data dir, if any, before Raft starts
// (see Book); it reports whether partitions without state join.
func (r *resolved) settleBook() (join bool, err error) {
	if r.rootFS != nil {
		return false, nil
	}
	b, ok, err := ReadBook(r.Dir)
	if err != nil || !ok || b.DeploymentID == 0 {
		return false, err
	}
	if b.TokenHash != TokenHash(r.ClusterToken) {
		return false, fmt.Errorf("%w: %s belongs to a cluster with another cluster token (its %s records the token's hash %s): start it with the token it was created with",
			ErrOtherCluster, r.Dir, BookFile, b.TokenHash)
	}
	if b.DeploymentID != singleDeploymentID {
		// The constant keeps its pre-token handling (settleDeployment).
		r.deploymentID = b.DeploymentID
	}
	return b.Join, nil
}

// HasRaftState reports whether the data dir dir holds Raft state (a node
// that ran there before).
func HasRaftState(dir string) bool {
	_, ok, err := recordedDeploymentID(filepath.Join(dir, "raft"))
	return ok || err != nil
}
