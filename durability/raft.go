package durability

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/lni/dragonboat/v4"
	"github.com/lni/dragonboat/v4/raftio"
	sm "github.com/lni/dragonboat/v4/statemachine"
)

// Raft is the dragonboat multi-Raft Backend: partition p is Raft shard p+1,
// each with an on-disk state machine in one shared badger DB.
type Raft struct {
	cfg   *resolved
	log   *slog.Logger
	nh    *dragonboat.NodeHost
	db    *badger.DB
	lanes []*lane
	// machines holds each partition's state machine once dragonboat made
	// it: reads look at its pending writes first (pending.go).
	machines []atomic.Pointer[stateMachine]
	// leaders holds the last LeaderEvent of each partition, so LeaderID
	// agrees with OnLeaderChange (dragonboat's own GetLeaderID lags it).
	leaders []atomic.Pointer[LeaderEvent]
	// unfenced counts, with the fence off, what it would have refused.
	unfenced unfencedCounts

	stop    chan struct{}
	closing atomic.Bool
	closeMu sync.Mutex

	dbMu     sync.RWMutex // Load holds it shared so Close never frees the DB under a read
	dbClosed bool
}

var _ Backend = (*Raft)(nil)

// OpenRaft opens (or creates) the data in cfg.Dir and starts every
// partition. It returns before leaders are elected: watch OnLeaderChange or
// LeaderID. Restarts must use the same Dir, ReplicaID, addresses, Members,
// ClusterToken and Partitions. A partition without Raft state in Dir is
// founded only as cfg.InitialClusterState says; otherwise OpenRaft fails
// with ErrNoRaftState (a lost disk). A Dir of another deployment fails with
// ErrOtherCluster.
func OpenRaft(cfg RaftConfig) (*Raft, error) {
	r, err := openRaft(cfg)
	if err != nil && cfg.Listener != nil {
		// Taken over: the caller will not close it. A transport that
		// started has closed it already.
		_ = cfg.Listener.Close()
	}
	return r, err
}

func openRaft(cfg RaftConfig) (*Raft, error) {
	rc, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	installRaftLogger(cfg.Logger, cfg.LibraryLogLevel)
	log := cfg.Logger
	if log == nil {
		log = discard
	}
	join, err := rc.settleBook()
	if err != nil {
		return nil, err
	}
	if err := rc.settleDeployment(log); err != nil {
		return nil, err
	}
	db, err := openBadger(badgerOptions(rc))
	if err != nil {
		return nil, err
	}
	r := &Raft{
		cfg:     rc,
		log:     log,
		db:      db,
		leaders: make([]atomic.Pointer[LeaderEvent], rc.Partitions),
		stop:    make(chan struct{}),
	}
	nhc := rc.nodeHostConfig(&leaderEvents{r: r, fn: cfg.OnLeaderChange})
	nhc.SystemEventListener = newPeerEvents(rc.members, rc.ReplicaID, cfg.OnPeer) // events.go
	r.nh, err = dragonboat.NewNodeHost(nhc)
	if err != nil {
		db.Close()
		hint := ""
		// dragonboat's sentinels are internal; their text is all we can test.
		switch {
		case strings.Contains(err.Error(), "not the owner"):
			hint = fmt.Sprintf(" (the data was created with a RaftAddress other than %q)", rc.selfAddr)
		case strings.Contains(err.Error(), "deployment ID changed"):
			hint = " (the data was created with other members or another cluster token)"
		}
		return nil, fmt.Errorf("durability: start raft in %s%s: %w", rc.where(), hint, err)
	}
	r.machines = make([]atomic.Pointer[stateMachine], rc.Partitions)
	create := func(shard, _ uint64) sm.IOnDiskStateMachine {
		m := newStateMachine(db, shard, log, cfg.UnsafeNoFence)
		m.pend.hold, m.pend.crash, m.pend.appliedFirst = cfg.holdPending, cfg.crash, cfg.UnsafeAppliedFirst
		m.unsafeNoFloor, m.unsafeGroupApart = cfg.UnsafeNoSweepFloor, cfg.UnsafeGroupApart
		m.unfenced = &r.unfenced
		m.startFlusher()
		if p := int(shard) - 1; p >= 0 && p < len(r.machines) {
			r.machines[p].Store(m)
		}
		return m
	}
	for p := range rc.Partitions {
		// Members only to found a partition: given them,
		// dragonboat would silently found again on a lost disk.
		hasState := r.nh.HasNodeInfo(shardID(p), rc.ReplicaID)
		members, err := rc.initialMembers(p, hasState)
		if !hasState && join {
			// Added by a member first (Book.Join): join with no members.
			members, err = nil, nil
		}
		if err == nil {
			err = r.nh.StartOnDiskReplica(members, !hasState && join, create, rc.shardConfig(p))
			if errors.Is(err, dragonboat.ErrInvalidShardSettings) {
				err = fmt.Errorf("members %v differ from those the data was created with: %w", rc.members, err)
			}
			if err != nil {
				err = fmt.Errorf("durability: start partition %d in %s: %w", p, rc.where(), err)
			}
		}
		if err != nil {
			r.nh.Close()
			db.Close()
			return nil, err
		}
	}
	r.lanes = make([]*lane, rc.Partitions)
	for p := range r.lanes {
		r.lanes[p] = newLane(r.nh, shardID(p), rc, &r.closing, r.stop)
		r.lanes[p].start()
	}
	return r, nil
}

func (r *resolved) where() string {
	if r.Dir == "" {
		return "memory"
	}
	return r.Dir
}

// leaderEvents records dragonboat's leader updates and forwards them; it
// runs on a dragonboat goroutine.
type leaderEvents struct {
	r  *Raft
	fn func(LeaderEvent) // may be nil
}

func (e *leaderEvents) LeaderUpdated(info raftio.LeaderInfo) {
	if info.ShardID == 0 || info.ShardID > uint64(len(e.r.leaders)) {
		return
	}
	ev := LeaderEvent{
		Partition: int(info.ShardID - 1),
		LeaderID:  info.LeaderID,
		Term:      info.Term,
		IsSelf:    info.LeaderID == e.r.cfg.ReplicaID,
	}
	e.r.leaders[ev.Partition].Store(&ev)
	if e.fn != nil {
		e.fn(ev)
	}
}

// ReplicaID is this node's replica ID.
func (r *Raft) ReplicaID() uint64 { return r.cfg.ReplicaID }

// Partitions is the number of partitions.
func (r *Raft) Partitions() int { return len(r.lanes) }

func (r *Raft) checkPartition(p int) error {
	if p < 0 || p >= len(r.lanes) {
		return fmt.Errorf("%w: %d of %d", errPartition, p, len(r.lanes))
	}
	return nil
}

// Propose implements Backend.
func (r *Raft) Propose(p int, rec *Record, c Completion) {
	if err := r.checkPartition(p); err != nil {
		c.Committed(0, fmt.Errorf("%w: %w", ErrRetry, err))
		return
	}
	r.lanes[p].push(rec, c)
}

// ProposeGroup implements Backend.
func (r *Raft) ProposeGroup(p int, recs []*Record, comps []Completion) {
	if err := r.checkPartition(p); err != nil {
		for _, c := range comps {
			c.Committed(0, fmt.Errorf("%w: %w", ErrRetry, err))
		}
		return
	}
	r.lanes[p].pushGroup(recs, comps)
}

// view reads partition p as applied: its state machine's pending writes,
// then badger. The caller holds dbMu.
func (r *Raft) view(p int) view {
	if m := r.machine(p); m != nil {
		return m.view()
	}
	return view{db: r.db}
}

// machine is partition p's state machine, nil before dragonboat made it.
func (r *Raft) machine(p int) *stateMachine {
	if p < 0 || p >= len(r.machines) {
		return nil
	}
	return r.machines[p].Load()
}

// Load implements Backend.
func (r *Raft) Load(p int, resource string) (Record, bool, error) {
	if err := r.checkPartition(p); err != nil {
		return Record{}, false, err
	}
	r.dbMu.RLock()
	defer r.dbMu.RUnlock()
	if r.dbClosed {
		return Record{}, false, ErrClosed
	}
	v := r.view(p)
	rec, found, err := loadRecord(v, shardID(p), resource)
	if err != nil {
		return Record{}, false, fmt.Errorf("durability: load %q from partition %d: %w", resource, p, err)
	}
	if m := r.machine(p); m != nil && m.unsafeNoFence {
		if e, err := readEpoch(v, shardID(p)); err == nil {
			m.noteLoad(resource, e)
		}
	}
	return rec, found, nil
}

// TokenFloor returns the applied token floor of partition p from local
// storage: above the token of every record removed from it.
func (r *Raft) TokenFloor(p int) (int64, error) {
	return readShard(r, p, "token floor", readFloor)
}

// readShard reads what (read) of partition p from local storage.
func readShard[T any](r *Raft, p int, what string, read func(getter, uint64) (T, error)) (T, error) {
	var zero T
	if err := r.checkPartition(p); err != nil {
		return zero, err
	}
	r.dbMu.RLock()
	defer r.dbMu.RUnlock()
	if r.dbClosed {
		return zero, ErrClosed
	}
	v, err := read(r.view(p), shardID(p))
	if err != nil {
		return zero, fmt.Errorf("durability: read %s of partition %d: %w", what, p, err)
	}
	return v, nil
}

// releasedPage bounds the records Released examines per read txn, so fn
// runs with no txn or lock held and a long scan never holds up Close.
const releasedPage = 256

// Released calls fn, in key order from the first resource after after ("":
// the partition's first), for stored records of partition p that are free at
// nowMs minus grace: Unlocked with LastModifiedMs <= cutoffMs, or Locked with
// ExpiresMs <= cutoffMs; it stops early when fn returns false, and after
// limit records (limit <= 0: no limit). Records are read from local storage.
//
// Records are read a page at a time, each page a consistent view, and fn
// runs between pages: it may call the backend, and a record it is given
// may have changed since (a Remove decided from it is fenced by its Base).
// Corrupt records are skipped.
func (r *Raft) Released(p int, cutoffMs int64, after string, limit int, fn func(Record) bool) error {
	if err := r.checkPartition(p); err != nil {
		return err
	}
	var (
		from   = shardKey(nil, shardID(p), keyRecord) // the first key to examine
		first  = true
		sent   int
		warned bool
	)
	if after != "" {
		from = append(recordKey(nil, shardID(p), []byte(after)), 0) // the key right after after's
	}
	for {
		page := releasedPage
		if limit > 0 {
			page = min(page, limit-sent)
		}
		recs, next, err := r.releasedPage(p, cutoffMs, from, page, first, &warned)
		if err != nil {
			return fmt.Errorf("durability: scan partition %d for released records: %w", p, err)
		}
		for _, rec := range recs {
			sent++
			if !fn(rec) {
				return nil
			}
		}
		if next == nil || (limit > 0 && sent >= limit) {
			return nil
		}
		from, first = next, false
	}
}

// releasedPage examines up to releasedPage records of partition p from key
// from on and returns the free ones, at most want, and the key to go on
// from (nil once the partition's records are exhausted). first marks a
// scan's first page.
func (r *Raft) releasedPage(p int, cutoffMs int64, from []byte, want int, first bool, warned *bool) ([]Record, []byte, error) {
	return r.scanPage(p, shardKey(nil, shardID(p), keyRecord), from, want, first, warned, func(rec *Record) bool {
		return rec.Locked && rec.ExpiresMs <= cutoffMs || !rec.Locked && rec.LastModifiedMs <= cutoffMs
	})
}

// scanPage examines up to releasedPage stored records of partition p whose
// keys start with keys, from key from on, and returns those keep wants, at
// most want, and the key to go on from (nil once they are exhausted). The
// first page of a scan flushes the pending writes first: a scan of badger
// alone would miss them. (Newer writes during a scan are fine: its pages
// are no snapshot.) Corrupt records are skipped, with one warning a scan.
func (r *Raft) scanPage(p int, keys, from []byte, want int, first bool, warned *bool, keep func(*Record) bool) ([]Record, []byte, error) {
	r.dbMu.RLock()
	defer r.dbMu.RUnlock()
	if r.dbClosed {
		return nil, nil, ErrClosed
	}
	if m := r.machine(p); m != nil && first {
		if err := m.pend.flush(); err != nil {
			return nil, nil, err
		}
	}
	var (
		recs []Record
		next []byte
	)
	err := r.db.View(func(txn *badger.Txn) error {
		records := len(shardKey(nil, shardID(p), keyRecord)) // where a key's resource starts
		it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: true, PrefetchSize: 64, Prefix: keys})
		defer it.Close()
		n := 0
		for it.Seek(from); it.Valid(); it.Next() {
			item := it.Item()
			if n == releasedPage || len(recs) == want {
				next = item.KeyCopy(nil)
				return nil
			}
			n++
			rec := Record{Resource: string(item.Key()[records:])}
			var kept bool
			err := item.Value(func(v []byte) error {
				if err := decodeStored(v, &rec); err != nil {
					return err
				}
				kept = keep(&rec)
				rec.Owner = bytes.Clone(rec.Owner) // v is only valid in here
				rec.Slots = cloneSlots(rec.Slots)
				return nil
			})
			switch {
			case errors.Is(err, errCorrupt):
				if !*warned {
					*warned = true
					r.log.Warn("durability: skipping corrupt stored record in scan", "partition", p, "resource", rec.Resource)
				}
			case err != nil:
				return err
			case kept:
				recs = append(recs, rec)
			}
		}
		return nil
	})
	return recs, next, err
}

// Held returns the stored records of partition p that are held at nowMs
// (Locked, with ExpiresMs >= nowMs: a lease is live up to and including
// its expiry) and whose resource starts with prefix and sorts after
// after: the first limit of them in key (name) order. Records are read
// from local storage, a page at a time as Released reads them, so the
// whole is no snapshot of the partition; corrupt records are skipped.
func (r *Raft) Held(p int, prefix, after string, nowMs int64, limit int) ([]Record, error) {
	if err := r.checkPartition(p); err != nil {
		return nil, err
	}
	// The first key to examine: the prefix's first, or just past after.
	from := recordKey(nil, shardID(p), []byte(prefix))
	if after >= prefix {
		from = append(recordKey(nil, shardID(p), []byte(after)), 0)
	}
	var (
		recs   []Record
		warned bool
	)
	for first := true; len(recs) < limit; first = false {
		page, next, err := r.heldPage(p, prefix, from, nowMs, limit-len(recs), first, &warned)
		if err != nil {
			return nil, fmt.Errorf("durability: scan partition %d for held records: %w", p, err)
		}
		recs = append(recs, page...)
		if next == nil {
			break
		}
		from = next
	}
	return recs, nil
}

// heldPage examines up to releasedPage records of partition p whose
// resource starts with prefix, from key from on, and returns the held
// ones at nowMs, at most want, and the key to go on from (nil once the
// prefix's records are exhausted).
func (r *Raft) heldPage(p int, prefix string, from []byte, nowMs int64, want int, first bool, warned *bool) ([]Record, []byte, error) {
	return r.scanPage(p, recordKey(nil, shardID(p), []byte(prefix)), from, want, first, warned, func(rec *Record) bool {
		return rec.Locked && rec.ExpiresMs >= nowMs
	})
}

// Barrier implements Backend with a Raft read index. Without a deadline in
// ctx it gives up after ProposalTimeout. While the partition has no leader,
// or a new leader has not yet committed in its term, read indexes are
// dropped: Barrier retries every tick until ctx ends. Errors match ErrClosed,
// or ErrRetry and the cause.
func (r *Raft) Barrier(ctx context.Context, p int) error {
	if err := r.checkPartition(p); err != nil {
		return err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.cfg.ProposalTimeout)
		defer cancel()
	}
	for {
		err := r.readIndex(ctx, p)
		switch {
		case err == nil:
			return nil
		case r.closing.Load() || errors.Is(err, dragonboat.ErrClosed):
			return fmt.Errorf("durability: barrier on partition %d: %w", p, ErrClosed)
		case ctx.Err() != nil:
			return fmt.Errorf("durability: barrier on partition %d: %w (%w)", p, ErrRetry, ctx.Err())
		case errors.Is(err, dragonboat.ErrTimeoutTooSmall), errors.Is(err, dragonboat.ErrInvalidDeadline):
			// Less than a tick left: as good as expired.
			return fmt.Errorf("durability: barrier on partition %d: %w (%w)", p, ErrRetry, context.DeadlineExceeded)
		case !errors.Is(err, dragonboat.ErrShardNotReady) && !errors.Is(err, dragonboat.ErrTimeout) &&
			!errors.Is(err, dragonboat.ErrSystemBusy):
			return fmt.Errorf("durability: barrier on partition %d: %w (%w)", p, ErrRetry, err)
		}
		if errors.Is(err, dragonboat.ErrShardNotReady) {
			t := time.NewTimer(r.cfg.RTT)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
		}
	}
}

// Leads reports whether this node leads partition p in term, as Raft says
// now (not as the last leader event said).
func (r *Raft) Leads(p int, term uint64) bool {
	if r.checkPartition(p) != nil || r.closing.Load() {
		return false
	}
	return leads(r.nh, shardID(p), r.cfg.ReplicaID, term)
}

// leads reports whether replica leads shard in term, as dragonboat says now.
func leads(nh *dragonboat.NodeHost, shard, replica, term uint64) bool {
	id, t, ok, err := nh.GetLeaderID(shard)
	return err == nil && ok && id == replica && t == term
}

// await waits for a proposal or read index of partition p: its result once
// completed, ErrRetry wrapping what else ended it, or ErrClosed.
func (r *Raft) await(ctx context.Context, rs *dragonboat.RequestState, p int, what string) (sm.Result, error) {
	defer rs.Release()
	select {
	case res := <-rs.ResultC():
		if err := r.lanes[p].resultError(res); err != nil {
			return sm.Result{}, fmt.Errorf("durability: %s partition %d: %w (%w)", what, p, ErrRetry, err)
		}
		return res.GetResult(), nil
	case <-ctx.Done():
		return sm.Result{}, fmt.Errorf("durability: %s partition %d: %w (%w)", what, p, ErrRetry, ctx.Err())
	case <-r.stop:
		return sm.Result{}, fmt.Errorf("durability: %s partition %d: %w", what, p, ErrClosed)
	}
}

var (
	errNotLeaderOfTerm = fmt.Errorf("%w: not the leader of that term", ErrRetry)
	errMarkerRejected  = fmt.Errorf("%w: epoch marker rejected (a later term was fenced)", ErrRetry)
)

// Fence starts this node's epoch over partition p in term: it proposes the
// epoch marker (term, this replica) and returns nil once the state machine
// accepted it here, which also means every earlier entry is applied here,
// and this node still leads p in term. From then on the partition's state
// machines apply only records decided in this epoch (statemachine.go).
// Errors match ErrRetry (not leader, rejected, dropped, timed out: retry
// while the term lasts) or ErrClosed.
func (r *Raft) Fence(ctx context.Context, p int, term uint64) error {
	if err := r.checkPartition(p); err != nil {
		return err
	}
	if !r.Leads(p, term) {
		return errNotLeaderOfTerm
	}
	cmd := appendEpoch(nil, Epoch{Term: term, Replica: r.cfg.ReplicaID})
	rs, err := r.nh.Propose(r.lanes[p].session, cmd, r.cfg.ProposalTimeout)
	if err != nil {
		return fmt.Errorf("durability: fence partition %d: %w", p, proposeError(err))
	}
	// A marker whose outcome is unknown is harmless: retrying proposes
	// another one of the same term, which is refused if the first was
	// accepted; then this node finds its own epoch stored.
	res, err := r.await(ctx, rs, p, "fence")
	if err != nil {
		return err
	}
	if res.Value == 0 && !r.epochIs(p, term) {
		return errMarkerRejected
	}
	if !r.Leads(p, term) {
		return errNotLeaderOfTerm
	}
	return nil
}

// TokenReach returns the applied ephemeral token reach of partition p
// from local storage: above every token an ephemeral lock of p was granted
// by a leader whose epoch ended before the stored one (see RaiseReach).
// Read after Fence, it is where this node's ephemeral tokens start.
func (r *Raft) TokenReach(p int) (int64, error) {
	return readShard(r, p, "token reach", readReach)
}

// RaiseReach raises the ephemeral token reach of partition p to at least
// reach, decided in this node's epoch of term, and returns nil once it is
// applied here: from then on this node may grant ephemeral tokens below
// reach. The entry is fenced like a batch: once a later leader's marker is
// accepted it changes nothing, so that leader, reading the reach after its
// fence, is above every token this one granted. Errors match ErrRetry or
// ErrClosed; a raise whose outcome is unknown grants nothing (the reach
// may be higher than this node knows, which costs a later leader nothing
// but larger tokens).
func (r *Raft) RaiseReach(ctx context.Context, p int, term uint64, reach int64) error {
	return r.proposeFenced(ctx, p, term, "raise token reach", func(e Epoch) []byte { return appendReach(nil, e, reach) })
}

var errFencedEntryRejected = fmt.Errorf("%w: rejected (a later term was fenced)", ErrRetry)

// proposeFenced proposes the entry cmd makes for this node's epoch of term
// in partition p (a reach or grace entry) and returns nil once it is
// applied here; ErrRetry if this node does not lead p in term, or the
// entry was rejected, dropped or timed out; or ErrClosed.
func (r *Raft) proposeFenced(ctx context.Context, p int, term uint64, what string, cmd func(Epoch) []byte) error {
	if err := r.checkPartition(p); err != nil {
		return err
	}
	if !r.Leads(p, term) {
		return errNotLeaderOfTerm
	}
	rs, err := r.nh.Propose(r.lanes[p].session, cmd(Epoch{Term: term, Replica: r.cfg.ReplicaID}), r.cfg.ProposalTimeout)
	if err != nil {
		return fmt.Errorf("durability: %s partition %d: %w", what, p, proposeError(err))
	}
	res, err := r.await(ctx, rs, p, what)
	if err != nil {
		return err
	}
	if res.Value == 0 {
		return fmt.Errorf("durability: %s partition %d: %w", what, p, errFencedEntryRejected)
	}
	return nil
}

// EphemeralGrace returns, read after Fence, how long the ephemeral leases
// granted by earlier leaders of p may still run after the last of them
// stopped serving: none is longer than that (see RaiseEphemeralTTL).
func (r *Raft) EphemeralGrace(p int) (time.Duration, error) {
	carried, err := readShard(r, p, "ephemeral grace", func(g getter, shard uint64) (int64, error) {
		_, carried, err := readGrace(g, shard)
		return carried, err
	})
	return time.Duration(carried) * time.Millisecond, err
}

// RaiseEphemeralTTL raises the bound on the TTL of p's ephemeral leases in
// this node's epoch of term to at least ttl (whole milliseconds, rounded
// up), and returns nil once it is applied here: from then on this node may
// grant or extend ephemeral leases that long. It also clears the grace
// carried from earlier reigns, so this node proposes it only while it
// serves (it waited that grace out first). Fenced like a batch: the next
// leader's marker carries the bound over as its grace. Errors match
// ErrRetry or ErrClosed.
func (r *Raft) RaiseEphemeralTTL(ctx context.Context, p int, term uint64, ttl time.Duration) error {
	return r.proposeGrace(ctx, p, term, ttl, graceRaise)
}

// SetEphemeralGrace records, once this node has stopped serving p in term
// for good (it is closing), that its ephemeral leases of p still run at
// most left: the next leader waits that out instead of the longest TTL the
// reign allowed. Errors match ErrRetry or ErrClosed; on any, the next
// leader waits the longer grace.
func (r *Raft) SetEphemeralGrace(ctx context.Context, p int, term uint64, left time.Duration) error {
	return r.proposeGrace(ctx, p, term, left, graceExact)
}

// maxHandoverBytes caps the leases part of a hand-over entry, so that
// applying it stays within one badger txn (a sixth of its limit here).
const maxHandoverBytes = 192 << 10

// ErrHandoverTooLarge is returned by HandOver for more leases than one
// entry holds; the next leader then waits them out instead.
var ErrHandoverTooLarge = errors.New("durability: too many live ephemeral leases to hand over in one entry")

// HandOver offers leases, the live ephemeral leases of p, to the next
// leader, once this node has stopped deciding for p in term (it is moving
// p away or closing): fenced like a batch, and returns nil once it is
// applied here. The next leader keeps them (HandedOver) and waits none of
// them out, unless this node has a reach or grace entry of term applied
// after it (it served p again, and may have granted or extended leases
// the hand-over does not hold): that voids it. Errors match ErrRetry or
// ErrClosed, or are ErrHandoverTooLarge; on any, the next leader waits
// out the reign's bound, as without a hand-over.
func (r *Raft) HandOver(ctx context.Context, p int, term uint64, leases []HandedLease) error {
	b := appendLeases(nil, leases)
	if len(b) > maxHandoverBytes {
		return fmt.Errorf("%w (%d leases, %d bytes)", ErrHandoverTooLarge, len(leases), len(b))
	}
	return r.proposeFenced(ctx, p, term, "hand over ephemeral leases of", func(e Epoch) []byte { return appendHandover(nil, e, b) })
}

// HandedOver returns, read after Fence, the ephemeral leases the previous
// leader of p handed over to this epoch (HandOver), with the time each had
// left then; none if it handed none over, or voided them.
func (r *Raft) HandedOver(p int) ([]HandedLease, error) {
	return readShard(r, p, "hand-over", func(g getter, shard uint64) ([]HandedLease, error) {
		h, err := readHandover(g, shard)
		if err != nil || h.state != handTaken {
			return nil, err
		}
		e, err := readEpoch(g, shard)
		if err != nil || e != h.epoch {
			return nil, err
		}
		return decodeLeases(h.leases)
	})
}

func (r *Raft) proposeGrace(ctx context.Context, p int, term uint64, ttl time.Duration, mode byte) error {
	ms := int64((ttl + time.Millisecond - 1) / time.Millisecond)
	return r.proposeFenced(ctx, p, term, "ephemeral grace", func(e Epoch) []byte { return appendGrace(nil, e, ms, mode) })
}

// epochIs reports whether the stored epoch of p is this node's in term.
func (r *Raft) epochIs(p int, term uint64) bool {
	r.dbMu.RLock()
	defer r.dbMu.RUnlock()
	if r.dbClosed {
		return false
	}
	e, _ := readEpoch(r.view(p), shardID(p))
	return e == Epoch{Term: term, Replica: r.cfg.ReplicaID}
}

// Confirm proves that this node led partition p in term at some moment
// after the call started: Raft says so before, a read index completes (a
// quorum answered this leader's heartbeat), and Raft still says so after.
// A read index alone proves nothing, since a follower forwards it to the
// leader; the checks before and after rule that out, because a node leads
// a term at most once. See partition.Leadership for the lease built on it.
func (r *Raft) Confirm(ctx context.Context, p int, term uint64) error {
	if err := r.checkPartition(p); err != nil {
		return err
	}
	if !r.Leads(p, term) {
		return errNotLeaderOfTerm
	}
	timeout := r.cfg.RTT * electionRTT
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	rs, err := r.nh.ReadIndex(shardID(p), timeout)
	if err != nil {
		return fmt.Errorf("durability: confirm leadership of partition %d: %w", p, proposeError(err))
	}
	if _, err := r.await(ctx, rs, p, "confirm leadership of"); err != nil {
		return err
	}
	if !r.Leads(p, term) {
		return errNotLeaderOfTerm
	}
	return nil
}

// readIndex runs one read index. Each attempt is bounded, because a read
// index sent to a leader that loses its term is dropped without an answer.
func (r *Raft) readIndex(ctx context.Context, p int) error {
	ctx, cancel := context.WithTimeout(ctx, readIndexAttempts*electionRTT*r.cfg.RTT)
	defer cancel()
	_, err := r.nh.SyncRead(ctx, shardID(p), nil)
	return err
}

// LeaderID reports the leader of partition p as last announced to
// OnLeaderChange; ok is false when none is known or the backend is closed.
func (r *Raft) LeaderID(p int) (leader, term uint64, ok bool) {
	if r.checkPartition(p) != nil || r.closing.Load() {
		return 0, 0, false
	}
	ev := r.leaders[p].Load()
	if ev == nil {
		return 0, 0, false
	}
	return ev.LeaderID, ev.Term, ev.LeaderID != 0
}

// TransferLeadership asks the leader of partition p to hand over to replica
// to. It returns once requested; watch OnLeaderChange or LeaderID.
func (r *Raft) TransferLeadership(p int, to uint64) error {
	if err := r.checkPartition(p); err != nil {
		return err
	}
	if err := r.nh.RequestLeaderTransfer(shardID(p), to); err != nil {
		return fmt.Errorf("durability: transfer leadership of partition %d to %d: %w", p, to, err)
	}
	return nil
}

// Close implements Backend. Unsent records complete with an error matching
// ErrClosed and ErrRetry. Sent ones get a short grace to finish, then the
// NodeHost stops and the rest complete with ErrClosed and ErrUnknownOutcome.
// A second Close returns nil.
func (r *Raft) Close() error {
	r.closeMu.Lock()
	defer r.closeMu.Unlock()
	if r.closing.Load() {
		return nil
	}
	r.closing.Store(true)
	for _, l := range r.lanes {
		l.shut()
	}
	close(r.stop)
	r.awaitLanes(2 * electionRTT * r.cfg.RTT)
	r.nh.Close()
	r.awaitLanes(0)
	// dragonboat closed the state machines, which flushed their pending
	// writes; a shard it stopped some other way must not flush into a
	// closed DB.
	for p := range r.machines {
		if m := r.machine(p); m != nil {
			if err := m.pend.shutdown(); err != nil {
				r.log.Error("durability: flush pending writes on close", "partition", p, "err", err)
			}
		}
	}
	r.dbMu.Lock()
	defer r.dbMu.Unlock()
	r.dbClosed = true
	if err := r.db.Close(); err != nil {
		return fmt.Errorf("durability: close badger in %s: %w", r.cfg.where(), err)
	}
	return nil
}

// awaitLanes waits for every waiter to finish, at most grace (0: forever).
func (r *Raft) awaitLanes(grace time.Duration) {
	var expired <-chan time.Time
	if grace > 0 {
		t := time.NewTimer(grace)
		defer t.Stop()
		expired = t.C
	}
	for _, l := range r.lanes {
		select {
		case <-l.done:
		case <-expired:
			return
		}
	}
}

// Stats counts the backend's work since it opened.
type Stats struct {
	Proposals uint64 // Raft entries proposed and settled (each a group of records)
	Records   uint64 // records committed and applied
	Failures  uint64 // records of proposed entries not applied: timed out, dropped or stale
	// Where a persistent write's time goes, summed over the Proposals
	// (divide by them for a mean): Wait from an entry's first record to
	// its proposal (the partition had its most entries in flight), Commit
	// from the proposal to its outcome (append and fsync, commit, apply).
	Wait, Commit time.Duration
}

// Unfenced reports, for a node whose fence is off (RaftConfig.UnsafeNoFence),
// how many records of another epoch than their partition's its state
// machines applied, and how many of those moved a lock (a release, a
// removal, a grant to a new owner) after the node had loaded the resource
// in the current epoch (see Load): the fence-off negative control's
// scenario, a deposed leader's write landing behind the new leader's
// cache, arose that many times. Both are 0 while the fence is on.
func (r *Raft) Unfenced() (applied, behindLoads uint64) {
	return r.unfenced.applied.Load(), r.unfenced.behind.Load()
}

// Stats sums the counters of every partition.
func (r *Raft) Stats() Stats {
	var s Stats
	for _, l := range r.lanes {
		s.Proposals += l.proposals.Load()
		s.Records += l.records.Load()
		s.Failures += l.failures.Load()
		s.Wait += time.Duration(l.waitNanos.Load())
		s.Commit += time.Duration(l.commitNanos.Load())
	}
	return s
}
