package durability

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/dgraph-io/badger/v4"
	sm "github.com/lni/dragonboat/v4/statemachine"
)

func memDB(t *testing.T, memTable int64) *badger.DB {
	t.Helper()
	opts := badgerOptions(&resolved{}).WithMemTableSize(memTable).WithValueThreshold(memTable / 16)
	db, err := openBadger(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func rec(res string, token int64, rev uint64) Record {
	return Record{Resource: res, Owner: []byte("o-" + res), ExpiresMs: 1000 * token, Token: token, Revision: rev, Locked: true, LastModifiedMs: int64(rev)}
}

func entry(index uint64, recs ...Record) sm.Entry {
	return sm.Entry{Index: index, Cmd: encodeBatch(nil, recs)}
}

func mustLoad(t *testing.T, db *badger.DB, shard uint64, res string) (Record, bool) {
	t.Helper()
	var (
		r  Record
		ok bool
	)
	err := db.View(func(txn *badger.Txn) error {
		var err error
		r, ok, err = loadRecord(txn, shard, res)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return r, ok
}

func applied(t *testing.T, db *badger.DB, shard uint64) uint64 {
	t.Helper()
	var idx uint64
	if err := db.View(func(txn *badger.Txn) (err error) { idx, err = readApplied(txn, shard); return err }); err != nil {
		t.Fatal(err)
	}
	return idx
}

func TestStateMachineAdvanceOnly(t *testing.T) {
	db := memDB(t, 8<<20)
	s := newStateMachine(db, 3, discard)
	if idx, err := s.Open(nil); err != nil || idx != 0 {
		t.Fatalf("Open = %d, %v", idx, err)
	}
	ents := []sm.Entry{
		entry(5, rec("a", 1, 1), rec("b", 1, 1)),
		// a: same pair (ignored), older token (ignored), newer revision
		// (applied) within one entry; b: newer token.
		entry(6, rec("a", 1, 1), rec("a", 0, 9), rec("a", 1, 2), rec("b", 2, 1)),
		{Index: 7, Cmd: []byte("garbage")},
	}
	if _, err := s.Update(ents); err != nil {
		t.Fatal(err)
	}
	if r := ents[0].Result; r.Value != 2 || r.Data != nil {
		t.Fatalf("entry 5 result %+v", r)
	}
	if r := ents[1].Result; r.Value != 2 || !bytes.Equal(r.Data, []byte{0b1100}) {
		t.Fatalf("entry 6 result %+v", r)
	}
	if r := ents[2].Result; r.Value != 0 || r.Data != nil {
		t.Fatalf("corrupt entry result %+v", r)
	}
	if got, _ := mustLoad(t, db, 3, "a"); !reflect.DeepEqual(got, rec("a", 1, 2)) {
		t.Fatalf("a = %+v", got)
	}
	if got, _ := mustLoad(t, db, 3, "b"); !reflect.DeepEqual(got, rec("b", 2, 1)) {
		t.Fatalf("b = %+v", got)
	}
	if _, ok := mustLoad(t, db, 4, "a"); ok {
		t.Fatal("shard 4 sees shard 3's record")
	}
	if idx := applied(t, db, 3); idx != 7 {
		t.Fatalf("applied index %d, want 7", idx)
	}
	if idx, _ := newStateMachine(db, 3, discard).Open(nil); idx != 7 {
		t.Fatalf("reopened at %d", idx)
	}
	// Later updates are checked against what is stored, whether the state
	// machine remembers it (s) or must read it (a fresh one).
	for i, m := range []*stateMachine{s, newStateMachine(db, 3, discard)} {
		name := []string{"warm", "cold"}[i]
		ents := []sm.Entry{entry(uint64(8+i), rec("a", 1, 2), rec("b", 1, 5), rec(name, 0, 1))}
		if _, err := m.Update(ents); err != nil {
			t.Fatal(err)
		}
		if r := ents[0].Result; r.Value != 1 || !bytes.Equal(r.Data, []byte{0b100}) {
			t.Fatalf("%s: stale writes: result %+v, want only the new resource applied", name, r)
		}
		if got, _ := mustLoad(t, db, 3, "a"); !reflect.DeepEqual(got, rec("a", 1, 2)) {
			t.Fatalf("%s: a = %+v", name, got)
		}
	}
}

// A 1 MB memtable caps a badger txn at ~150 KB, so this Update must be split
// into several txns, each carrying the index of its last entry.
func TestStateMachineSplitsLargeUpdates(t *testing.T) {
	db := memDB(t, 1<<20)
	s := newStateMachine(db, 1, discard)
	owner := bytes.Repeat([]byte{'x'}, 200)
	var ents []sm.Entry
	for i := range 40 {
		recs := make([]Record, 50)
		for j := range recs {
			recs[j] = Record{Resource: fmt.Sprintf("r%d-%d", i, j), Owner: owner, Token: 1, Revision: 1}
		}
		ents = append(ents, entry(uint64(100+i), recs...))
	}
	if _, err := s.Update(ents); err != nil {
		t.Fatal(err)
	}
	for i, e := range ents {
		if e.Result.Value != 50 {
			t.Fatalf("entry %d applied %d of 50", i, e.Result.Value)
		}
	}
	if _, ok := mustLoad(t, db, 1, "r39-49"); !ok {
		t.Fatal("last record missing")
	}
	if idx := applied(t, db, 1); idx != 139 {
		t.Fatalf("applied index %d, want 139", idx)
	}
}

func TestStateMachineSnapshot(t *testing.T) {
	src := memDB(t, 8<<20)
	s := newStateMachine(src, 2, discard)
	var want []Record
	for i := range 600 {
		want = append(want, rec(fmt.Sprintf("res/%04d", i), int64(i+1), 1))
	}
	if _, err := s.Update([]sm.Entry{entry(40, want...)}); err != nil {
		t.Fatal(err)
	}
	view, err := s.PrepareSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	// Writes after Prepare are not in the snapshot.
	if _, err := s.Update([]sm.Entry{entry(41, rec("late", 1, 1))}); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := s.SaveSnapshot(view, &buf, make(chan struct{})); err != nil {
		t.Fatal(err)
	}

	dst := memDB(t, 8<<20)
	other := newStateMachine(dst, 7, discard)
	d := newStateMachine(dst, 2, discard)
	if _, err := other.Update([]sm.Entry{entry(3, rec("keep", 1, 1))}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Update([]sm.Entry{entry(9, rec("stale", 5, 5), rec("res/0000", 99, 1))}); err != nil {
		t.Fatal(err)
	}
	if err := d.RecoverFromSnapshot(bytes.NewReader(buf.Bytes()), make(chan struct{})); err != nil {
		t.Fatal(err)
	}
	for _, r := range want {
		if got, ok := mustLoad(t, dst, 2, r.Resource); !ok || !reflect.DeepEqual(got, r) {
			t.Fatalf("%s = %+v, %v", r.Resource, got, ok)
		}
	}
	for _, gone := range []string{"stale", "late"} {
		if _, ok := mustLoad(t, dst, 2, gone); ok {
			t.Fatalf("%s survived recovery", gone)
		}
	}
	if _, ok := mustLoad(t, dst, 7, "keep"); !ok {
		t.Fatal("recovery touched another shard")
	}
	if idx, _ := d.Open(nil); idx != 40 {
		t.Fatalf("recovered applied index %d, want 40", idx)
	}
	// The recovered state, not what d wrote before, orders later writes.
	next := []sm.Entry{entry(41, rec("stale", 0, 1), rec("res/0000", 1, 2), rec("res/0001", 2, 1))}
	if _, err := d.Update(next); err != nil {
		t.Fatal(err)
	}
	if r := next[0].Result; r.Value != 2 || !bytes.Equal(r.Data, []byte{0b011}) {
		t.Fatalf("writes after recovery: result %+v, want the first two applied", r)
	}

	// A truncated stream fails and leaves no applied index, so dragonboat
	// would install the snapshot again after a restart.
	err = d.RecoverFromSnapshot(bytes.NewReader(buf.Bytes()[:buf.Len()-40]), make(chan struct{}))
	if err == nil {
		t.Fatal("truncated snapshot accepted")
	}
	if idx, _ := d.Open(nil); idx != 0 {
		t.Fatalf("applied index %d after failed recovery", idx)
	}
	stop := make(chan struct{})
	close(stop)
	if err := d.RecoverFromSnapshot(bytes.NewReader(buf.Bytes()), stop); !errors.Is(err, sm.ErrSnapshotStopped) {
		t.Fatalf("stopped recovery: %v", err)
	}
}

func TestStateMachineLookupAfterClose(t *testing.T) {
	s := newStateMachine(memDB(t, 8<<20), 1, discard)
	if _, err := s.Lookup(nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Lookup(nil); !errors.Is(err, errSMClosed) {
		t.Fatalf("Lookup after Close: %v", err)
	}
	if _, err := s.Open(nil); err != nil {
		t.Fatalf("shared DB was closed: %v", err)
	}
}

// The order cache stays within its byte bound and keeps answering for
// what it holds.
func TestOrderCacheBound(t *testing.T) {
	var c orderCache
	key := func(i int) []byte { return fmt.Appendf(bytes.Repeat([]byte{'k'}, 1000), "%d", i) }
	for i := range 20_000 {
		c.put(key(i), order{int64(i), 1})
		if c.bytes > maxOrderCacheBytes {
			t.Fatalf("after %d puts: %d bytes cached, bound %d", i+1, c.bytes, maxOrderCacheBytes)
		}
	}
	if want := maxOrderCacheBytes / orderCacheCost(len(key(19_999))); len(c.m) < want*9/10 {
		t.Fatalf("%d entries cached, want about %d", len(c.m), want)
	}
	if o, ok := c.get(key(19_999)); !ok || o.token != 19_999 {
		t.Fatalf("the newest entry: %+v %v", o, ok)
	}
	c.put(key(19_999), order{5, 5}) // an update costs nothing more
	before := c.bytes
	c.put(key(19_999), order{6, 6})
	if c.bytes != before {
		t.Fatalf("update changed the size: %d → %d", before, c.bytes)
	}
	c.clear()
	if _, ok := c.get(key(19_999)); ok || c.bytes != 0 {
		t.Fatal("clear kept entries")
	}
}
