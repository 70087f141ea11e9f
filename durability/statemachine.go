package durability

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/dgraph-io/badger/v4"
	sm "github.com/lni/dragonboat/v4/statemachine"
)

var errSMClosed = errors.New("durability: state machine closed")

// stateMachine is one partition's dragonboat on-disk state machine. It
// applies records to the shared badger DB under its shard's key prefix.
//
// Per entry, Result.Value is the number of records applied. When that is
// less than the record count, Result.Data is a bitmap (bit i of byte i/8 set
// = record i applied), or nil if the entry could not be applied at all.
type stateMachine struct {
	db         *badger.DB
	shard      uint64
	log        *slog.Logger
	closed     atomic.Bool
	appliedKey []byte

	// Used only by Update and RecoverFromSnapshot, which dragonboat never
	// runs concurrently.
	keys       []byte // key arena
	appliedVal [8]byte
	orders     orderCache
}

// orderCache remembers the stored (token, revision) of recently written
// resources, so the advance-only check of a write need not read badger
// (that read was a tenth of a node's CPU under write load). It holds what
// the current txn has written too: when a commit fails it is cleared.
type orderCache struct {
	m     map[string]order
	bytes int // what m holds, counted as orderCacheCost per entry
}

type order struct {
	token    int64
	revision uint64
}

// maxOrderCacheBytes bounds the cache per shard; a full cache forgets
// arbitrary entries (Go's map order) to make room.
const maxOrderCacheBytes = 4 << 20

// orderCacheCost approximates an entry's memory: its key, the key's string
// header and the order, plus the map's slot overhead.
func orderCacheCost(keyLen int) int { return keyLen + 64 }

func (c *orderCache) get(res []byte) (order, bool) {
	o, ok := c.m[string(res)]
	return o, ok
}

func (c *orderCache) put(res []byte, o order) {
	if c.m == nil {
		c.m = make(map[string]order)
	}
	if _, ok := c.m[string(res)]; ok {
		c.m[string(res)] = o
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
	c.m[string(res)] = o
	c.bytes += cost
}

func (c *orderCache) clear() { c.m, c.bytes = nil, 0 }

var _ sm.IOnDiskStateMachine = (*stateMachine)(nil)

func newStateMachine(db *badger.DB, shard uint64, log *slog.Logger) *stateMachine {
	return &stateMachine{
		db:         db,
		shard:      shard,
		log:        log.With("shard", shard),
		appliedKey: shardKey(nil, shard, keyApplied),
	}
}

// Open returns the applied index stored with the data.
func (s *stateMachine) Open(<-chan struct{}) (uint64, error) {
	var idx uint64
	err := s.db.View(func(txn *badger.Txn) error {
		var err error
		idx, err = readApplied(txn, s.shard)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("durability: shard %d: read applied index: %w", s.shard, err)
	}
	return idx, nil
}

// Update applies every entry in one badger txn with the applied index,
// splitting into several txns (each with its own index) only when badger's
// txn size limit requires it. Only storage failures return an error, since
// that stops the node; a corrupt or oversized entry is logged and skipped
// the same way on every replica.
func (s *stateMachine) Update(ents []sm.Entry) ([]sm.Entry, error) {
	a := applier{s: s, txn: s.db.NewTransaction(true), keys: s.keys[:0]}
	defer func() { a.txn.Discard() }()
	for i := range ents {
		if err := a.entry(&ents[i]); err != nil {
			s.orders.clear()
			return nil, fmt.Errorf("durability: shard %d: apply entry %d: %w", s.shard, ents[i].Index, err)
		}
	}
	if err := a.commit(); err != nil {
		s.orders.clear()
		return nil, fmt.Errorf("durability: shard %d: commit: %w", s.shard, err)
	}
	s.keys = a.keys[:0]
	return ents, nil
}

// setCost is what badger charges a txn for one Set (txn.checkSize): key,
// value, two meta bytes and ten bytes of version.
func setCost(k, v int) int64 { return int64(k + v + 12) }

var appliedCost = setCost(shardKeyLen, 8)

type applier struct {
	s           *stateMachine
	txn         *badger.Txn
	count, size int64  // badger's accounting of txn, mirrored
	last        uint64 // index of the last entry fully in txn; 0 = none
	keys        []byte
}

func (a *applier) entry(e *sm.Entry) error {
	e.Result = sm.Result{}
	n, cost, err := scanBatch(e.Cmd)
	if err != nil {
		a.s.log.Warn("durability: skipping corrupt raft entry", "index", e.Index, "len", len(e.Cmd))
		a.last = e.Index
		return nil
	}
	maxCount, maxSize := a.s.db.MaxBatchCount(), a.s.db.MaxBatchSize()
	if a.count+n+1 >= maxCount || a.size+cost+appliedCost >= maxSize {
		if a.last != 0 {
			if err := a.commit(); err != nil {
				return err
			}
			a.txn = a.s.db.NewTransaction(true)
		}
		if n+1 >= maxCount || cost+appliedCost >= maxSize {
			a.s.log.Warn("durability: skipping raft entry too big for one badger txn",
				"index", e.Index, "records", n, "bytes", cost)
			a.last = e.Index
			return nil
		}
	}
	var (
		rec     Record
		bits    []byte
		applied uint64
		body    = e.Cmd[batchHeaderLen:]
	)
	for j := range n {
		var res, val []byte
		res, val, body, _ = nextRecord(body, &rec) // validated by scanBatch
		ok, err := a.put(res, val, rec.Token, rec.Revision)
		if err != nil {
			return err
		}
		switch {
		case ok:
			applied++
			if bits != nil {
				bits[j/8] |= 1 << (j % 8)
			}
		case bits == nil:
			bits = make([]byte, (n+7)/8)
			for k := range j {
				bits[k/8] |= 1 << (k % 8)
			}
		}
	}
	e.Result = sm.Result{Value: applied, Data: bits}
	a.last = e.Index
	return nil
}

// scanBatch validates a whole entry before any of it is applied and returns
// its record count and badger cost.
func scanBatch(cmd []byte) (n, cost int64, err error) {
	body, count, err := batchBody(cmd)
	if err != nil {
		return 0, 0, err
	}
	var rec Record
	for range count {
		var res, val []byte
		res, val, body, err = nextRecord(body, &rec)
		if err != nil {
			return 0, 0, err
		}
		cost += setCost(shardKeyLen+len(res), len(val))
	}
	if len(body) != 0 {
		return 0, 0, errCorrupt
	}
	return int64(count), cost, nil
}

// put stores val unless the stored record's (Token, Revision) is not older.
// val aliases the entry, which outlives the txn's commit.
func (a *applier) put(res, val []byte, token int64, revision uint64) (bool, error) {
	start := len(a.keys)
	a.keys = recordKey(a.keys, a.s.shard, res)
	key := a.keys[start:len(a.keys):len(a.keys)]
	old, known := a.s.orders.get(res)
	if !known {
		var err error
		if old, known, err = a.stored(key, res); err != nil {
			return false, err
		}
		if known {
			a.s.orders.put(res, old)
		}
	}
	if known && !advances(token, revision, old.token, old.revision) {
		a.keys = a.keys[:start]
		return false, nil
	}
	if err := a.txn.Set(key, val); err != nil {
		return false, err
	}
	a.s.orders.put(res, order{token, revision})
	a.count++
	a.size += setCost(len(key), len(val))
	return true, nil
}

// stored reads the order of the record at key, as this txn sees it; known
// is false when there is none (or it is corrupt: it is overwritten).
func (a *applier) stored(key, res []byte) (o order, known bool, err error) {
	item, err := a.txn.Get(key)
	switch {
	case errors.Is(err, badger.ErrKeyNotFound):
		return order{}, false, nil
	case err != nil:
		return order{}, false, err
	}
	err = item.Value(func(v []byte) error {
		t, r, err := valueOrder(v)
		if err != nil {
			a.s.log.Error("durability: overwriting corrupt stored record", "resource", string(res))
			return nil
		}
		o, known = order{t, r}, true
		return nil
	})
	return o, known, err
}

// commit writes the applied index and commits the txn.
func (a *applier) commit() error {
	if a.last == 0 {
		return nil
	}
	binary.BigEndian.PutUint64(a.s.appliedVal[:], a.last)
	if err := a.txn.Set(a.s.appliedKey, a.s.appliedVal[:]); err != nil {
		return err
	}
	if err := a.txn.Commit(); err != nil {
		return err
	}
	a.count, a.size, a.last = 0, 0, 0
	a.keys = a.keys[:0] // badger copied them on commit
	return nil
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
	if err := s.db.Sync(); err != nil {
		return fmt.Errorf("durability: shard %d: sync: %w", s.shard, err)
	}
	return nil
}

// Close leaves the shared DB open: the Raft backend closes it after the
// NodeHost.
func (s *stateMachine) Close() error {
	s.closed.Store(true)
	return nil
}
