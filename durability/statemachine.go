package durability

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"

	"github.com/dgraph-io/badger/v4"
	sm "github.com/lni/dragonboat/v4/statemachine"
)

var errSMClosed = errors.New("durability: state machine closed")

// stateMachine is one partition's dragonboat on-disk state machine. It
// applies records to the shared badger DB under its shard's key prefix.
//
// The fence. dragonboat forwards a follower's proposal to whoever leads when
// it arrives and shows Update no term, so a deposed leader's
// late proposal can commit in a new leader's reign. Update therefore
// applies only what the current leader decided from what is stored:
//   - an epoch marker (a new leader's term and ID, proposed before it
//     serves) is accepted only with a higher term than the stored epoch;
//   - a batch applies only if it was decided in the stored epoch;
//   - each record of it applies only if the stored record is still at the
//     Index the decision was made from (compare-and-set), and never lowers
//     the token: below the stored record's, or, with none stored, below
//     the shard's token floor;
//   - a removal (Record.Remove) applies under the same guard and only if a
//     record is stored: it deletes the record and raises the floor above
//     the record's token, so the name's tokens keep growing after it;
//   - a reach entry (Raft.RaiseReach) raises the ephemeral token reach
//     only if it was decided in the stored epoch, and never lowers it;
//   - a grace entry (Raft.RaiseEphemeralTTL), likewise fenced, raises the
//     reign's ephemeral TTL bound and clears the carried one; an accepted
//     epoch marker adds the reign's bound to the carried one and starts
//     the new reign's at 0 (store.go).
//
// A rejected record changes nothing, the same way on every replica.
//
// Applied writes reach badger through pend (pending.go, write-behind).
//
// Per entry, Result.Value is the entry's index when it was applied (for a
// batch: any of its records; a marker: accepted), and 0 when nothing of it
// was. Result.Data is nil when every record applied, else a bitmap (bit i
// of byte i/8 set = record i applied).
type stateMachine struct {
	db         *badger.DB
	shard      uint64
	log        *slog.Logger
	closed     atomic.Bool
	appliedKey []byte
	epochKey   []byte
	floorKey   []byte
	reachKey   []byte
	graceKey   []byte
	handKey    []byte
	// unsafeNoFence applies batches with the advance-only guard alone: a
	// negative control for the fault tests.
	unsafeNoFence bool
	// loads, only with unsafeNoFence: the epoch in which this node last
	// loaded each resource (Raft.Load), so that a deposed epoch's record
	// applied after a load of the current epoch is counted as one the
	// loader's cache no longer matches (Raft.Unfenced).
	loadsMu sync.Mutex
	loads   map[string]Epoch
	// unsafeNoFloor removes records without raising the token floor: a
	// name's next first grant may take a token below its removed
	// record's. A negative control for the fault tests.
	unsafeNoFloor bool
	// unsafeGroupApart applies a group's records one by one
	// (RaftConfig.UnsafeGroupApart).
	unsafeGroupApart bool
	unfenced         *unfencedCounts // shared by a Raft's machines (Raft.Unfenced)
	pend             *pending
	applied          atomic.Uint64 // the last index Update applied (Status)

	// Used only by Open, Update and RecoverFromSnapshot, which dragonboat
	// never runs concurrently.
	epoch  Epoch    // the stored epoch
	floor  int64    // the stored token floor
	reach  int64    // the stored ephemeral token reach
	grace  grace    // the stored ephemeral grace
	handed handover // the stored hand-over
	keys   []byte   // key arena
	vals   []byte   // stored-value arena
	orders orderCache
}

// orderCache remembers the stored (token, revision) of recently written
// resources, so the advance-only check of a write need not read badger
// (that read was a tenth of a node's CPU under write load). It holds what
// the current Update has written too: when it fails it is cleared.
type orderCache struct {
	m     map[string]*order // a pointer, so a known key's update allocates nothing
	bytes int               // what m holds, counted as orderCacheCost per entry
}

type order struct {
	index    uint64 // Raft index of the entry that stored the record
	token    int64
	revision uint64
}

// maxOrderCacheBytes bounds the cache per shard; a full cache forgets
// arbitrary entries (Go's map order) to make room.
const maxOrderCacheBytes = 4 << 20

// orderCacheCost approximates an entry's memory: its key, the key's string
// header, the pointer and the order it points to, plus the map's slot
// overhead.
func orderCacheCost(keyLen int) int { return keyLen + 88 }

func (c *orderCache) get(res []byte) (order, bool) {
	if o := c.m[string(res)]; o != nil {
		return *o, true
	}
	return order{}, false
}

func (c *orderCache) put(res []byte, o order) {
	if c.m == nil {
		c.m = make(map[string]*order)
	}
	if known := c.m[string(res)]; known != nil {
		*known = o
		return
	}
	cost := orderCacheCost(len(res))
	for k := range c.m {
		if c.bytes+cost <= maxOrderCacheBytes {
			break
		}
		delete(c.m, k)
		c.bytes -= orderCacheCost(len(k))
	}
	c.m[string(res)] = &o
	c.bytes += cost
}

// forget drops res, whose record was removed.
func (c *orderCache) forget(res []byte) {
	if _, ok := c.m[string(res)]; ok {
		delete(c.m, string(res))
		c.bytes -= orderCacheCost(len(res))
	}
}

func (c *orderCache) clear() { c.m, c.bytes = nil, 0 }

var _ sm.IOnDiskStateMachine = (*stateMachine)(nil)

// newStateMachine returns shard's state machine on db. Its writes reach
// badger before Update returns until startFlusher is called.
func newStateMachine(db *badger.DB, shard uint64, log *slog.Logger, unsafeNoFence bool) *stateMachine {
	appliedKey := shardKey(nil, shard, keyApplied)
	return &stateMachine{
		db:            db,
		shard:         shard,
		log:           log.With("partition", int(shard)-1), // as kahuna numbers them (shard p+1)
		appliedKey:    appliedKey,
		epochKey:      shardKey(nil, shard, keyEpoch),
		floorKey:      shardKey(nil, shard, keyFloor),
		reachKey:      shardKey(nil, shard, keyReach),
		graceKey:      shardKey(nil, shard, keyGrace),
		handKey:       shardKey(nil, shard, keyHandover),
		unsafeNoFence: unsafeNoFence,
		unfenced:      &unfencedCounts{},
		pend:          newPending(db, appliedKey),
	}
}

// startFlusher makes Update return before its writes reach badger: a
// flusher writes them a moment later (pending.go).
func (s *stateMachine) startFlusher() { s.pend.start() }

// view reads the shard as it was applied.
func (s *stateMachine) view() view { return view{p: s.pend, db: s.db} }

// Open returns the applied index stored with the data.
func (s *stateMachine) Open(<-chan struct{}) (uint64, error) {
	var idx uint64
	err := s.db.View(func(txn *badger.Txn) error {
		g := txnGetter{txn}
		var err error
		if idx, err = readApplied(g, s.shard); err != nil {
			return err
		}
		if s.epoch, err = readEpoch(g, s.shard); err != nil {
			return err
		}
		if s.floor, err = readFloor(g, s.shard); err != nil {
			return err
		}
		if s.reach, err = readReach(g, s.shard); err != nil {
			return err
		}
		if s.grace.reignMs, s.grace.carriedMs, err = readGrace(g, s.shard); err != nil {
			return err
		}
		s.handed, err = readHandover(g, s.shard)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("durability: shard %d: read applied index, epoch, token floor, reach, grace and hand-over: %w", s.shard, err)
	}
	s.applied.Store(idx)
	return idx, nil
}

// Update applies every entry to the pending writes, which reach badger
// later with the applied index (pending.go). Only storage failures return
// an error, since that stops the node; a corrupt or oversized entry (more
// than one badger txn takes) is logged and skipped the same way on every
// replica.
func (s *stateMachine) Update(ents []sm.Entry) ([]sm.Entry, error) {
	a := applier{s: s, keys: s.keys[:0], vals: s.vals[:0], epoch: s.epoch, floor: s.floor, reach: s.reach, grace: s.grace, handed: s.handed}
	for i := range ents {
		if err := a.entry(&ents[i]); err != nil {
			s.orders.clear()
			return nil, fmt.Errorf("durability: shard %d: apply entry %d: %w", s.shard, ents[i].Index, err)
		}
		a.keys, a.vals = a.keys[:0], a.vals[:0] // the pending writes copied them
	}
	s.epoch, s.floor, s.reach, s.grace, s.handed = a.epoch, a.floor, a.reach, a.grace, a.handed
	s.keys, s.vals = a.keys[:0], a.vals[:0]
	if a.last != 0 {
		s.applied.Store(a.last)
		if err := s.pend.wrote(a.last); err != nil {
			s.orders.clear()
			return nil, fmt.Errorf("durability: shard %d: %w", s.shard, err)
		}
	}
	return ents, nil
}

// setCost is what badger charges a txn for one Set (txn.checkSize): key,
// value, two meta bytes and ten bytes of version.
func setCost(k, v int) int64 { return int64(k + v + 12) }

var (
	appliedCost = setCost(shardKeyLen, 8)
	floorCost   = setCost(shardKeyLen, 8)
)

type applier struct {
	s          *stateMachine
	last       uint64 // index of the last entry fully applied; 0 = none
	keys, vals []byte
	epoch      Epoch    // as the entries applied leave it
	floor      int64    // likewise
	reach      int64    // likewise
	grace      grace    // likewise
	handed     handover // likewise
}

// grace is a shard's ephemeral grace (store.go), in milliseconds.
type grace struct{ reignMs, carriedMs int64 }

func (a *applier) entry(e *sm.Entry) error {
	e.Result = sm.Result{}
	h, body, ops, cost, err := scanEntry(e.Cmd)
	if err != nil {
		a.s.log.Warn("durability: skipping corrupt raft entry", "index", e.Index, "len", len(e.Cmd))
		a.last = e.Index
		return nil
	}
	switch h.kind {
	case kindEpoch:
		return a.marker(e, h.epoch)
	case kindReach:
		return a.raise(e, h.epoch, h.reach)
	case kindGrace:
		return a.raiseTTL(e, h.epoch, h.ttlMs, h.exact)
	case kindHandover:
		return a.handOver(e, h.epoch, body)
	}
	if ops+1 >= a.s.db.MaxBatchCount() || cost+appliedCost >= a.s.db.MaxBatchSize() {
		a.s.log.Warn("durability: skipping raft entry too big for one badger txn",
			"index", e.Index, "records", h.count, "bytes", cost)
		a.last = e.Index
		return nil
	}
	if err := a.s.pend.room(ops, cost, a.last); err != nil {
		return err
	}
	var (
		rec      Record
		bits     []byte
		applied  uint64
		behind   uint64 // unfenced records applied after a load in this epoch
		fenced   = h.kind != kindLegacyBatch && !a.s.unsafeNoFence
		stale    = fenced && h.epoch != a.epoch
		unfenced = h.kind != kindLegacyBatch && a.s.unsafeNoFence && h.epoch != a.epoch
	)
	if h.kind == kindGroup && !stale && !a.s.unsafeGroupApart {
		// All or nothing: one record the fence refuses refuses them all.
		ok, err := a.admitsAll(body, h, fenced)
		if err != nil {
			return err
		}
		stale = !ok
	}
	for j := range h.count {
		var res, val []byte
		res, val, body, _ = nextRecord(body, h.kind, &rec) // validated by scanEntry
		ok, moves := false, false                          // moves: a release, a removal or a grant to a new owner
		if !stale {
			var old order
			if old, ok, err = a.put(res, val, &rec, e.Index, fenced); err != nil {
				return err
			}
			moves = rec.Remove || !rec.Locked || rec.Token != old.token
		}
		switch {
		case ok:
			applied++
			if unfenced && moves && a.epoch != (Epoch{}) && a.s.loadedIn(res) == a.epoch {
				behind++
			}
			if bits != nil {
				bits[j/8] |= 1 << (j % 8)
			}
		case bits == nil:
			bits = make([]byte, (h.count+7)/8)
			for k := range j {
				bits[k/8] |= 1 << (k % 8)
			}
		}
	}
	if applied > 0 {
		e.Result = sm.Result{Value: e.Index, Data: bits}
	}
	if unfenced {
		a.s.unfenced.applied.Add(applied)
		a.s.unfenced.behind.Add(behind)
	}
	a.last = e.Index
	return nil
}

// unfencedCounts counts, on one node (its Raft's state machines), what a
// fence-off negative control needs to see to know its scenario arose. Both
// stay 0 while the fence is on (RaftConfig.UnsafeNoFence off).
type unfencedCounts struct {
	// applied: records decided in another epoch than their partition's
	// that the fence would have refused.
	applied atomic.Uint64
	// behind: those of them that move the lock (a release, a removal, a
	// grant to a new owner; not an extension), applied after this node
	// loaded their resource in the partition's current epoch: what its
	// leader cached no longer matches the store, which is how a missing
	// fence shows in answers.
	behind atomic.Uint64
}

// noteLoad records, with the fence off, that resource was loaded in epoch.
func (s *stateMachine) noteLoad(resource string, epoch Epoch) {
	s.loadsMu.Lock()
	if s.loads == nil {
		s.loads = make(map[string]Epoch)
	}
	s.loads[resource] = epoch
	s.loadsMu.Unlock()
}

// loadedIn is the epoch in which resource was last loaded (noteLoad).
func (s *stateMachine) loadedIn(resource []byte) Epoch {
	s.loadsMu.Lock()
	defer s.loadsMu.Unlock()
	return s.loads[string(resource)]
}

// marker applies a new leader's epoch marker: accepted only with a higher
// term than the stored epoch, so a late marker of an older leader (forwarded
// after a newer one was accepted) cannot roll the epoch back.
func (a *applier) marker(e *sm.Entry, ep Epoch) error {
	if ep.Term <= a.epoch.Term {
		a.last = e.Index
		return nil
	}
	var v [16]byte
	binary.BigEndian.PutUint64(v[:8], ep.Term)
	binary.BigEndian.PutUint64(v[8:], ep.Replica)
	if err := a.s.pend.room(1, setCost(len(a.s.epochKey), len(v)), a.last); err != nil {
		return err
	}
	a.s.pend.set(a.s.epochKey, v[:])
	switch {
	case a.handed.state == handOffered && a.handed.epoch == a.epoch:
		// The reign that ends handed its live ephemeral leases over and
		// decided nothing after: the new leader keeps them, and waits out
		// only what earlier reigns carried. Its own reign's bound starts
		// at the longest of them, for the leader after it.
		next := a.handed
		next.state, next.epoch = handTaken, ep
		if err := a.setHandover(next); err != nil {
			return err
		}
		if err := a.setGrace(grace{reignMs: next.maxLeftMs, carriedMs: a.grace.carriedMs}); err != nil {
			return err
		}
	case a.grace.reignMs > 0:
		// The reign that ends may have granted ephemeral leases this long:
		// the next leader waits them out (with what it carried itself).
		if err := a.setGrace(grace{carriedMs: max(a.grace.carriedMs, a.grace.reignMs)}); err != nil {
			return err
		}
		fallthrough
	default:
		if err := a.setHandover(handover{}); err != nil {
			return err
		}
	}
	a.last = e.Index
	a.epoch = ep
	e.Result = sm.Result{Value: e.Index}
	return nil
}

// raise applies a reach entry: accepted only if decided in the stored
// epoch (any epoch with the fence switched off), so a deposed leader cannot
// raise the reach past what the next leader read after its fence. An
// accepted entry never lowers the reach; its Result.Value is the index.
func (a *applier) raise(e *sm.Entry, ep Epoch, reach int64) error {
	if ep != a.epoch && !a.s.unsafeNoFence {
		a.last = e.Index
		return nil
	}
	if reach > a.reach {
		if err := a.s.pend.room(1, setCost(len(a.s.reachKey), 8), a.last); err != nil {
			return err
		}
		vstart := len(a.vals)
		a.vals = binary.BigEndian.AppendUint64(a.vals, uint64(reach))
		a.s.pend.set(a.s.reachKey, a.vals[vstart:])
		a.reach = reach
	}
	if err := a.voidHandover(ep); err != nil {
		return err
	}
	a.last = e.Index
	e.Result = sm.Result{Value: e.Index}
	return nil
}

// raiseTTL applies a grace entry: accepted only if decided in the stored
// epoch (any with the fence switched off). A raise lifts the reign's TTL
// bound to ttlMs and clears the carried bound (its leader waited it out
// before it served, and only a serving leader proposes one). An exact one
// sets the reign's bound to ttlMs, the longest its leader's live ephemeral
// leases still run once it stopped serving (Raft.SetEphemeralGrace).
func (a *applier) raiseTTL(e *sm.Entry, ep Epoch, ttlMs int64, exact bool) error {
	if ep != a.epoch && !a.s.unsafeNoFence {
		a.last = e.Index
		return nil
	}
	next := grace{reignMs: max(a.grace.reignMs, ttlMs)}
	if exact {
		next = grace{reignMs: ttlMs, carriedMs: a.grace.carriedMs}
	}
	if next != a.grace {
		if err := a.setGrace(next); err != nil {
			return err
		}
	}
	if err := a.voidHandover(ep); err != nil {
		return err
	}
	a.last = e.Index
	e.Result = sm.Result{Value: e.Index}
	return nil
}

// handOver applies a hand-over entry: accepted only if decided in the
// stored epoch (any with the fence switched off), it offers leases, the
// live ephemeral leases of a leader that stopped deciding for the shard,
// to the next leader (marker), unless that leader's reach or grace entry
// voids it first (voidHandover).
func (a *applier) handOver(e *sm.Entry, ep Epoch, leases []byte) error {
	if ep != a.epoch && !a.s.unsafeNoFence {
		a.last = e.Index
		return nil
	}
	h, err := newHandover(handOffered, ep, leases)
	if err != nil { // validated by parseHeader
		return err
	}
	if err := a.setHandover(h); err != nil {
		return err
	}
	a.last = e.Index
	e.Result = sm.Result{Value: e.Index}
	return nil
}

// voidHandover drops a hand-over offered in ep, whose leader has just had
// a reach or grace entry accepted: it serves again, and may grant or
// extend leases the hand-over does not hold. The next leader then waits
// out the reign's bound instead.
func (a *applier) voidHandover(ep Epoch) error {
	if a.handed.state != handOffered || a.handed.epoch != ep {
		return nil
	}
	return a.setHandover(handover{})
}

// setHandover stores h as the shard's hand-over (state 0: deletes it).
func (a *applier) setHandover(h handover) error {
	if h.state == 0 && a.handed.state == 0 {
		return nil
	}
	var v []byte
	if h.state != 0 {
		v = h.encode()
	}
	if err := a.s.pend.room(1, setCost(len(a.s.handKey), len(v)), a.last); err != nil {
		return err
	}
	if h.state == 0 {
		a.s.pend.del(a.s.handKey)
	} else {
		a.s.pend.set(a.s.handKey, v)
	}
	a.handed = h
	return nil
}

// setGrace stores g as the shard's grace.
func (a *applier) setGrace(g grace) error {
	if err := a.s.pend.room(1, setCost(len(a.s.graceKey), 16), a.last); err != nil {
		return err
	}
	vstart := len(a.vals)
	a.vals = binary.BigEndian.AppendUint64(a.vals, uint64(g.reignMs))
	a.vals = binary.BigEndian.AppendUint64(a.vals, uint64(g.carriedMs))
	a.s.pend.set(a.s.graceKey, a.vals[vstart:])
	a.grace = g
	return nil
}

// storedIndexCost bounds what appendStored adds to a command-form value.
const storedIndexCost = 10

// scanEntry validates a whole entry before any of it is applied and returns
// its header, its records part, and for a batch the most badger writes
// applying it takes (one per record, two per removal: the delete and the
// floor) and their cost.
func scanEntry(cmd []byte) (h header, records []byte, ops, cost int64, err error) {
	h, body, err := parseHeader(cmd)
	if err != nil || h.special() {
		return h, body, 0, 0, err // a hand-over's leases, else nothing
	}
	records = body
	var rec Record
	for range h.count {
		var res, val []byte
		res, val, body, err = nextRecord(body, h.kind, &rec)
		if err != nil {
			return h, nil, 0, 0, err
		}
		// A delete costs no more than a write of the same key.
		cost += setCost(shardKeyLen+len(res), len(val)+storedIndexCost)
		ops++
		if rec.Remove {
			cost += floorCost
			ops++
		}
	}
	if len(body) != 0 {
		return h, nil, 0, 0, errCorrupt
	}
	return h, records, ops, cost, nil
}

// admitsAll reports whether put would store every record of the batch
// body (of header h), changing nothing.
func (a *applier) admitsAll(body []byte, h header, fenced bool) (bool, error) {
	var rec Record
	for range h.count {
		var res []byte
		res, _, body, _ = nextRecord(body, h.kind, &rec) // validated by scanEntry
		_, ok, err := a.guard(res, &rec, fenced)
		if err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

// guard reads the stored order of resource res and reports whether put
// would store rec over it (see put).
func (a *applier) guard(res []byte, rec *Record, fenced bool) (old order, ok bool, err error) {
	old, known := a.s.orders.get(res)
	if !known {
		start := len(a.keys)
		a.keys = recordKey(a.keys, a.s.shard, res)
		key := a.keys[start:]
		old, known, err = a.stored(key, res)
		a.keys = a.keys[:start]
		if err != nil {
			return order{}, false, err
		}
		if known {
			a.s.orders.put(res, old)
		}
	}
	switch {
	case fenced && known:
		ok = old.index == rec.Base && rec.Token >= old.token
	case fenced:
		ok = rec.Base == 0 && !rec.Remove && rec.Token >= a.floor
	case rec.Remove:
		ok = known
	default:
		ok = !known || advances(rec.Token, rec.Revision, old.token, old.revision)
	}
	return old, ok, nil
}

// put stores the record of resource res (command-form value val) as written
// by the entry at index, or removes it (rec.Remove), if the guard lets it.
// Fenced, the stored record must still be at rec.Base and the token must
// not go down (with none stored: not below the floor). Otherwise (a legacy
// batch, or the fence switched off) a write must advance (Token, Revision).
// Either way a removal needs a stored record. It returns the order it
// checked the record against (zero when none was stored).
func (a *applier) put(res, val []byte, rec *Record, index uint64, fenced bool) (order, bool, error) {
	old, ok, err := a.guard(res, rec, fenced)
	if err != nil || !ok {
		return old, false, err
	}
	start := len(a.keys)
	a.keys = recordKey(a.keys, a.s.shard, res)
	key := a.keys[start:len(a.keys):len(a.keys)]
	if rec.Remove {
		// Unfenced, rec.Token may be below the stored one: the floor must
		// pass both.
		return old, true, a.remove(key, res, max(rec.Token, old.token))
	}
	vstart := len(a.vals)
	a.vals = appendStored(a.vals, val, index)
	a.s.pend.set(key, a.vals[vstart:])
	a.s.orders.put(res, order{index: index, token: rec.Token, revision: rec.Revision})
	return old, true, nil
}

// remove deletes the record of res at key and raises the floor above token.
func (a *applier) remove(key, res []byte, token int64) error {
	a.s.pend.del(key)
	a.s.orders.forget(res)
	if a.s.unsafeNoFloor {
		return nil
	}
	floor := token
	if floor < math.MaxInt64 {
		floor++
	}
	if floor <= a.floor {
		return nil
	}
	vstart := len(a.vals)
	a.vals = binary.BigEndian.AppendUint64(a.vals, uint64(floor))
	a.s.pend.set(a.s.floorKey, a.vals[vstart:])
	a.floor = floor
	return nil
}

// stored reads the order of the record at key as applied so far; known is
// false when there is none (or it is corrupt: it is overwritten).
func (a *applier) stored(key, res []byte) (o order, known bool, err error) {
	v, found, err := a.s.view().get(key)
	if err != nil || !found {
		return order{}, false, err
	}
	if o, err = storedOrder(v); err != nil {
		a.s.log.Error("durability: overwriting corrupt stored record", "resource", string(res))
		return order{}, false, nil
	}
	return o, true, nil
}

// Lookup serves dragonboat's read path; the backend reads badger directly,
// so only the empty query of a read-index barrier is supported.
func (s *stateMachine) Lookup(q any) (any, error) {
	if s.closed.Load() {
		return nil, errSMClosed
	}
	if q != nil {
		return nil, fmt.Errorf("durability: unsupported lookup %T", q)
	}
	return nil, nil
}

// Sync makes applied state durable; dragonboat calls it before compacting
// the log.
func (s *stateMachine) Sync() error {
	if err := s.pend.flush(); err != nil {
		return fmt.Errorf("durability: shard %d: sync: %w", s.shard, err)
	}
	if err := s.db.Sync(); err != nil {
		return fmt.Errorf("durability: shard %d: sync: %w", s.shard, err)
	}
	return nil
}

// Close leaves the shared DB open: the Raft backend closes it after the
// NodeHost.
func (s *stateMachine) Close() error {
	s.closed.Store(true)
	if err := s.pend.shutdown(); err != nil {
		return fmt.Errorf("durability: shard %d: close: %w", s.shard, err)
	}
	return nil
}
