package durability

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// Write-behind. Update applies to a shard's pending writes in memory and
// returns; a flusher writes them to badger a little later, many entries
// (and every change to one key) in one txn, off dragonboat's apply path.
// Inside Update, badger made the apply wait for a txn commit per Update
// (a skiplist insert per record plus one for the applied index, and a
// hand-off to badger's writer goroutine): with badger's commit skipped, a
// persistent lock op ran about 1.4× faster here.
//
// Why a crash loses nothing: writes enter the open generation in apply
// order, a flush seals it (each write is before or after the seal) and
// writes sealed generations in order, each in one badger txn with the
// applied index reached before it was sealed. So badger always holds a
// prefix of the applied writes, perhaps ending inside an entry, and an
// applied index no later than that prefix. Open reports that index, and
// dragonboat applies the later entries again from the Raft log, which it
// keeps until Sync (which flushes) has made them durable. Applying them
// again to the prefix gives the state they gave the first time: each
// record write is a compare-and-set on the stored record's index (or,
// unfenced, must advance its token and revision), so one already in the
// prefix is refused and one not yet there applies; the epoch and the token
// floor only grow. A generation split over several
// txns would break the prefix (a later entry's write in badger before an
// earlier one's), so room keeps each one within one txn.
//
// Readers look at the pending writes first, then at badger: Load, the
// token floor and the epoch see what was applied, flushed or not.
const (
	// flushDelay is how long written records wait for more to join them
	// in one badger txn.
	flushDelay = 20 * time.Millisecond
	// flushAt writes a generation at once when it holds this many keys.
	flushAt = 1024
)

// generation is a set of pending writes that goes to badger as one txn.
// Keys and values live in one arena, so a write costs no allocation of
// its own once its key is in the generation (a persistent lock op writes
// one key about twice a generation; the copies were a sixth of what the
// node allocated a record).
type generation struct {
	at          map[string]int // badger key → its write in writes
	writes      []pendingWrite // one per key, in the order keys first came
	arena       []byte         // the writes' keys and values; only appended to
	count, size int64          // badger's accounting of a txn of them
	applied     uint64         // the applied index they bring badger to
}

// pendingWrite is the last write of a key in a generation.
type pendingWrite struct {
	key, val []byte // in the arena; val nil: deleted
}

// arenaStart is a new generation's arena, grown by append as it fills.
const arenaStart = 16 << 10

func newGeneration() *generation {
	return &generation{at: make(map[string]int), arena: make([]byte, 0, arenaStart)}
}

// keep copies b into the arena. The copy is never empty-as-nil, so a
// stored empty value is not taken for a deletion, and its capacity ends
// with it, so nothing appended to it reaches the next copy. Earlier copies
// stay valid when the arena grows: they keep the array they point into.
func (g *generation) keep(b []byte) []byte {
	start := len(g.arena)
	g.arena = append(g.arena, b...)
	return g.arena[start:len(g.arena):len(g.arena)]
}

// set records a write of key; val is copied.
func (g *generation) set(key, val []byte) { g.put(key, g.keep(val)) }

func (g *generation) del(key []byte) { g.put(key, nil) }

func (g *generation) put(key, val []byte) {
	cost := setCost(len(key), len(val))
	if i, ok := g.at[string(key)]; ok {
		w := &g.writes[i]
		g.size += max(0, cost-setCost(len(key), len(w.val)))
		w.val = val
		return
	}
	g.at[string(key)] = len(g.writes)
	g.writes = append(g.writes, pendingWrite{key: g.keep(key), val: val})
	g.count++
	g.size += cost
}

// get returns key's pending value: found says whether key has one (val
// nil: deleted).
func (g *generation) get(key []byte) (val []byte, found bool) {
	i, ok := g.at[string(key)]
	if !ok {
		return nil, false
	}
	return g.writes[i].val, true
}

// pending is one shard's write-behind buffer. open takes Update's writes;
// sealed is the generation being written to badger (nil: none). mu guards
// both; flushMu makes flushes (and snapshot recovery) one at a time, in
// order, so badger's applied index only grows.
type pending struct {
	db         *badger.DB
	appliedKey []byte

	mu     sync.Mutex
	open   *generation
	sealed *generation
	err    error // the last flush's failure, reported by the next Update

	flushMu sync.Mutex

	// Test knobs (RaftConfig.holdPending, crash, UnsafeAppliedFirst).
	hold, crash, appliedFirst bool

	// Set when a flusher runs (start); without one every Update flushes
	// before it returns.
	kick chan struct{}
	stop chan struct{}
	done chan struct{}
}

func newPending(db *badger.DB, appliedKey []byte) *pending {
	return &pending{db: db, appliedKey: appliedKey, open: newGeneration()}
}

// start runs the flusher until shutdown.
func (p *pending) start() {
	p.kick = make(chan struct{}, 1)
	p.stop = make(chan struct{})
	p.done = make(chan struct{})
	go p.run()
}

func (p *pending) behind() bool { return p.kick != nil }

func (p *pending) run() {
	defer close(p.done)
	t := time.NewTimer(time.Hour)
	t.Stop()
	for {
		select {
		case <-p.kick:
		case <-p.stop:
			return
		}
		if p.hold {
			continue
		}
		// Wait flushDelay for more writes to join, less if the generation
		// fills up meanwhile (each Update kicks).
		t.Reset(flushDelay)
	wait:
		for !p.full() {
			select {
			case <-t.C:
				break wait
			case <-p.kick:
			case <-p.stop:
				t.Stop()
				return
			}
		}
		t.Stop()
		if err := p.flush(); err != nil {
			p.mu.Lock()
			p.err = err
			p.mu.Unlock()
		}
	}
}

// full reports whether the open generation holds flushAt keys.
func (p *pending) full() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.open.count >= flushAt
}

// wrote is called by Update after it applied entries up to applied: it
// wakes the flusher, or flushes at once without one.
func (p *pending) wrote(applied uint64) error {
	p.mu.Lock()
	p.open.applied = applied
	err := p.err
	p.mu.Unlock()
	if err != nil {
		return err
	}
	if p.appliedFirst {
		var v [8]byte
		binary.BigEndian.PutUint64(v[:], applied)
		if err := p.db.Update(func(txn *badger.Txn) error { return txn.Set(p.appliedKey, v[:]) }); err != nil {
			return err
		}
	}
	if !p.behind() {
		return p.flush()
	}
	select {
	case p.kick <- struct{}{}:
	default:
	}
	return nil
}

// set and del record Update's writes in the open generation.
func (p *pending) set(key, val []byte) {
	p.mu.Lock()
	p.open.set(key, val)
	p.mu.Unlock()
}

func (p *pending) del(key []byte) {
	p.mu.Lock()
	p.open.del(key)
	p.mu.Unlock()
}

// room makes room for an entry of count writes of size bytes: if the open
// generation could then make a txn badger refuses, it is flushed first,
// brought to applied (the last entry wholly in it).
func (p *pending) room(count, size int64, applied uint64) error {
	p.mu.Lock()
	full := p.open.count+count+1 >= p.db.MaxBatchCount() || p.open.size+size+appliedCost >= p.db.MaxBatchSize()
	if full && applied != 0 {
		p.open.applied = applied
	}
	p.mu.Unlock()
	if !full {
		return nil
	}
	return p.flush()
}

// flush writes the pending writes to badger: a generation whose write
// failed before, then the open one, each in one txn with its applied index.
func (p *pending) flush() error {
	p.flushMu.Lock()
	defer p.flushMu.Unlock()
	for range 2 {
		p.mu.Lock()
		if p.sealed == nil {
			if p.open.applied == 0 && len(p.open.writes) == 0 {
				p.mu.Unlock()
				return nil
			}
			p.sealed, p.open = p.open, newGeneration()
		}
		g := p.sealed
		p.mu.Unlock()
		if err := p.write(g); err != nil {
			return err
		}
		p.mu.Lock()
		p.sealed, p.err = nil, nil
		p.mu.Unlock()
	}
	return nil
}

func (p *pending) write(g *generation) error {
	txn := p.db.NewTransaction(true)
	defer txn.Discard()
	for _, w := range g.writes {
		var err error
		if w.val == nil {
			err = txn.Delete(w.key)
		} else {
			err = txn.Set(w.key, w.val)
		}
		if err != nil {
			return fmt.Errorf("durability: write %d pending keys: %w", len(g.writes), err)
		}
	}
	if g.applied != 0 {
		var v [8]byte
		binary.BigEndian.PutUint64(v[:], g.applied)
		if err := txn.Set(p.appliedKey, v[:]); err != nil {
			return fmt.Errorf("durability: write applied index: %w", err)
		}
	}
	if err := txn.Commit(); err != nil {
		return fmt.Errorf("durability: commit %d pending keys: %w", len(g.writes), err)
	}
	return nil
}

// get returns the pending value of key: found says whether key has one
// (val nil: deleted). The caller copies val before it returns it.
func (p *pending) get(key []byte) (val []byte, found bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if v, ok := p.open.get(key); ok {
		return v, true
	}
	if p.sealed != nil {
		if v, ok := p.sealed.get(key); ok {
			return v, true
		}
	}
	return nil, false
}

// discard drops every pending write (the shard's state is being replaced);
// the caller holds flushMu.
func (p *pending) discard() {
	p.mu.Lock()
	p.open, p.sealed, p.err = newGeneration(), nil, nil
	p.mu.Unlock()
}

// shutdown stops the flusher and flushes what is left.
func (p *pending) shutdown() error {
	if p.behind() {
		select {
		case <-p.stop:
		default:
			close(p.stop)
		}
		<-p.done
	}
	if p.crash {
		return nil
	}
	return p.flush()
}

// view reads keys as the shard applied them: pending writes, then badger.
// Every badger read is a txn of its own, begun after the pending writes
// were looked at: a flush commits a generation before it leaves them, so
// a key missing from them is in any txn begun afterwards.
type view struct {
	p  *pending // nil: badger only
	db *badger.DB
}

// get returns a copy of key's value; found is false when it has none.
func (v view) get(key []byte) (val []byte, found bool, err error) {
	if v.p != nil {
		if val, ok := v.p.get(key); ok {
			if val == nil {
				return nil, false, nil
			}
			return append([]byte(nil), val...), true, nil
		}
	}
	err = v.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(key)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		found = true
		val, err = item.ValueCopy(nil)
		return err
	})
	return val, found, err
}
