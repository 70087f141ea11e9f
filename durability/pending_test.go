package durability

import (
	"errors"
	"fmt"
	"testing"

	"github.com/dgraph-io/badger/v4"
)

// crashWithPending commits records on every partition while the flusher
// holds them back, checks they are read from the pending writes (badger
// has an older applied index), then closes the node as a crash would
// (pending writes lost) and reopens it. It returns what a reload finds
// for each record, against what was committed.
func crashWithPending(t *testing.T, appliedFirst bool) (want, got map[string]Record) {
	t.Helper()
	dir := t.TempDir()
	const partitions = 2
	cfg := RaftConfig{Dir: dir, Partitions: partitions, holdPending: true, crash: true, UnsafeAppliedFirst: appliedFirst}
	n := openNode(t, cfg)
	n.awaitSelfLeader(t)
	want = map[string]Record{}
	for p := range partitions {
		for i := range 5 {
			r := Record{Resource: fmt.Sprintf("crash/%d/%d", p, i), Owner: []byte("o"), Token: 1, Revision: 1, Locked: true, ExpiresMs: 1_700_000_000_000}
			if err := propose(t, n, p, r); err != nil {
				t.Fatal(err)
			}
			r.Revision, r.Token = 2, 2 // a second write of the same key
			if err := propose(t, n, p, r); err != nil {
				t.Fatal(err)
			}
			want[r.Resource] = r
		}
	}
	for p := range partitions {
		applied := n.machine(p).applied.Load()
		var stored uint64
		if err := n.db.View(func(txn *badger.Txn) (err error) { stored, err = readApplied(txnGetter{txn}, shardID(p)); return err }); err != nil {
			t.Fatal(err)
		}
		if !appliedFirst && stored >= applied {
			t.Fatalf("partition %d: badger is at the applied index %d: nothing was pending, the crash proves nothing", p, applied)
		}
	}
	for res, r := range want {
		var p int
		fmt.Sscanf(res, "crash/%d/", &p)
		rec, ok, err := n.Load(p, res)
		if err != nil || !ok || !sameRecord(rec, r) {
			t.Fatalf("before the crash, Load(%d, %s) = %+v, %v, %v; want %+v (the pending write)", p, res, rec, ok, err, r)
		}
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}

	n = openNode(t, RaftConfig{Dir: dir, Partitions: partitions})
	n.awaitSelfLeader(t)
	got = map[string]Record{}
	for res := range want {
		var p int
		fmt.Sscanf(res, "crash/%d/", &p)
		n.term(t, p) // the replay is applied before the new term's marker
		rec, ok, err := n.Load(p, res)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			got[res] = rec
		}
	}
	return want, got
}

// TestPendingWritesSurviveACrash: records applied but not yet flushed to
// badger are applied again from the Raft log after a crash.
func TestPendingWritesSurviveACrash(t *testing.T) {
	want, got := crashWithPending(t, false)
	for res, r := range want {
		if g, ok := got[res]; !ok || !sameRecord(g, r) {
			t.Errorf("after the crash %s = %+v (found %v), want %+v", res, g, ok, r)
		}
	}
}

// TestPendingWritesCrashNegativeControl: with the applied index stored ahead
// of the writes it covers, the same crash loses records, so the test above
// can see the loss.
func TestPendingWritesCrashNegativeControl(t *testing.T) {
	want, got := crashWithPending(t, true)
	lost := 0
	for res, r := range want {
		if g, ok := got[res]; !ok || !sameRecord(g, r) {
			lost++
		}
	}
	if lost == 0 {
		t.Fatalf("the broken variant lost none of %d records: the crash test cannot see a loss", len(want))
	}
	t.Logf("the broken variant lost %d of %d records", lost, len(want))
}

// TestPendingGenerationFitsOneTxn: a generation never grows past what one
// badger txn takes; Update flushes first (pending.room).
func TestPendingGenerationFitsOneTxn(t *testing.T) {
	db := memDB(t, 8<<20)
	p := newPending(db, shardKey(nil, 1, keyApplied))
	p.hold = true
	p.start()
	val := make([]byte, 512)
	maxCount, maxSize := db.MaxBatchCount(), db.MaxBatchSize()
	n := int(maxSize/int64(setCost(20, len(val)))) * 2 // twice what one txn holds
	for i := range n {
		key := recordKey(nil, 1, fmt.Appendf(nil, "k%08d", i))
		cost := setCost(len(key), len(val))
		if err := p.room(1, cost, uint64(i)); err != nil {
			t.Fatalf("room before write %d: %v", i, err)
		}
		p.set(key, val)
		p.mu.Lock()
		count, size := p.open.count, p.open.size
		p.mu.Unlock()
		if count+1 >= maxCount || size+appliedCost >= maxSize {
			t.Fatalf("after write %d the open generation holds %d keys, %d bytes: over badger's txn limit (%d, %d)", i, count, size, maxCount, maxSize)
		}
	}
	if err := p.wrote(uint64(n)); err != nil {
		t.Fatal(err)
	}
	if err := p.shutdown(); err != nil {
		t.Fatal(err)
	}
	var applied uint64
	if err := db.View(func(txn *badger.Txn) (err error) { applied, err = readApplied(txnGetter{txn}, 1); return err }); err != nil {
		t.Fatal(err)
	}
	if applied != uint64(n) {
		t.Fatalf("applied index after shutdown = %d, want %d", applied, n)
	}
	got, found, err := view{db: db}.get(recordKey(nil, 1, fmt.Appendf(nil, "k%08d", n-1)))
	if err != nil || !found || len(got) != len(val) {
		t.Fatalf("last key after shutdown: %d bytes, found %v, %v", len(got), found, err)
	}
}

// TestGenerationKeepsEachKeysLastWrite: a generation holds the last write
// of each key, an empty value apart from a deletion, and values read from
// it stay as they were while its arena grows; written to badger, it
// leaves exactly those writes.
func TestGenerationKeepsEachKeysLastWrite(t *testing.T) {
	g := newGeneration()
	key := func(i int) []byte { return fmt.Appendf(nil, "key/%05d", i) }
	val := func(i, round int) []byte {
		return fmt.Appendf(nil, "value %d of key %d, padded to grow the arena....", round, i)
	}
	const keys = 2000 // their values outgrow arenaStart several times
	g.set(key(0), val(0, 0))
	first, _ := g.get(key(0))
	for round := range 2 {
		for i := range keys {
			g.set(key(i), val(i, round))
		}
	}
	if string(first) != string(val(0, 0)) {
		t.Fatalf("a value read before the arena grew changed to %q", first)
	}
	g.del(key(1))
	g.set(key(2), nil)
	g.set(key(3), []byte{})
	if g.count != keys {
		t.Fatalf("count = %d after rewriting %d keys, want %d", g.count, keys, keys)
	}
	want := func(i int) (v []byte, found bool) {
		switch i {
		case 1:
			return nil, true
		case 2, 3:
			return []byte{}, true
		}
		return val(i, 1), true
	}
	for i := range keys {
		got, ok := g.get(key(i))
		w, _ := want(i)
		if !ok || (got == nil) != (w == nil) || string(got) != string(w) {
			t.Fatalf("get(%s) = %q (nil %v), %v; want %q (nil %v)", key(i), got, got == nil, ok, w, w == nil)
		}
	}
	if _, ok := g.get(key(keys)); ok {
		t.Fatalf("get of a key never written found it")
	}

	db := memDB(t, 8<<20)
	p := newPending(db, shardKey(nil, 1, keyApplied))
	if err := db.Update(func(txn *badger.Txn) error { return txn.Set(key(1), []byte("stored before")) }); err != nil {
		t.Fatal(err)
	}
	if err := p.write(g); err != nil {
		t.Fatal(err)
	}
	err := db.View(func(txn *badger.Txn) error {
		for i := range keys {
			w, _ := want(i)
			item, err := txn.Get(key(i))
			if w == nil {
				if !errors.Is(err, badger.ErrKeyNotFound) {
					return fmt.Errorf("deleted %s: Get = %v, want not found", key(i), err)
				}
				continue
			}
			if err != nil {
				return fmt.Errorf("get %s: %w", key(i), err)
			}
			got, err := item.ValueCopy(nil)
			if err != nil || string(got) != string(w) {
				return fmt.Errorf("badger has %q (%v) at %s, want %q", got, err, key(i), w)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
