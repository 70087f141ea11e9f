package durability

import (
	"bytes"
	"encoding/binary"
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

// from returns r decided from the stored record at base.
func from(r Record, base uint64) Record { r.Base = base; return r }

// stored is r as Load returns it after the entry at index wrote it.
func stored(r Record, index uint64) Record { r.Base, r.Term, r.Index = 0, 0, index; return r }

// testEpoch is the epoch of entry's batches.
var testEpoch = Epoch{Term: 3, Replica: 1}

func entry(index uint64, recs ...Record) sm.Entry {
	return epochEntry(index, testEpoch, recs...)
}

func epochEntry(index uint64, e Epoch, recs ...Record) sm.Entry {
	return sm.Entry{Index: index, Cmd: encodeBatch(nil, e, recs)}
}

func markerEntry(index uint64, e Epoch) sm.Entry {
	return sm.Entry{Index: index, Cmd: appendEpoch(nil, e)}
}

// legacyEntry is a batch as kahuna wrote it before the fence.
func legacyEntry(index uint64, recs ...Record) sm.Entry {
	b := []byte{kindLegacyBatch, 0, 0}
	for i := range recs {
		b = binary.AppendUvarint(b, uint64(len(recs[i].Resource)))
		b = append(b, recs[i].Resource...)
		b = appendValue(b, &recs[i])
	}
	setBatchCount(b, len(recs))
	return sm.Entry{Index: index, Cmd: b}
}

// fencedSM is a state machine of shard 3 whose epoch is testEpoch.
func fencedSM(t *testing.T, db *badger.DB) *stateMachine {
	t.Helper()
	s := newStateMachine(db, 3, discard, false)
	if _, err := s.Open(nil); err != nil {
		t.Fatal(err)
	}
	ents := []sm.Entry{markerEntry(1, testEpoch)}
	if _, err := s.Update(ents); err != nil || ents[0].Result.Value != 1 {
		t.Fatalf("marker: %+v %v", ents[0].Result, err)
	}
	return s
}

func mustLoad(t *testing.T, db *badger.DB, shard uint64, res string) (Record, bool) {
	t.Helper()
	var (
		r  Record
		ok bool
	)
	err := db.View(func(txn *badger.Txn) error {
		var err error
		r, ok, err = loadRecord(txnGetter{txn}, shard, res)
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
	if err := db.View(func(txn *badger.Txn) (err error) { idx, err = readApplied(txnGetter{txn}, shard); return err }); err != nil {
		t.Fatal(err)
	}
	return idx
}

func TestStateMachineFence(t *testing.T) {
	db := memDB(t, 8<<20)
	s := fencedSM(t, db)
	ents := []sm.Entry{
		entry(5, rec("a", 0, 1), rec("b", 0, 1)),
		// a: from a base it has moved past (rejected), a lower token from
		// the right base (rejected), the next write from the right base
		// (applied); c: new; b: from a base that never existed (rejected).
		entry(6, from(rec("a", 1, 2), 0), from(rec("a", -1, 9), 5), from(rec("a", 1, 2), 5), rec("c", 0, 1), from(rec("b", 1, 2), 4)),
		{Index: 7, Cmd: []byte("garbage")},
		// Decided in another epoch: nothing of it applies.
		epochEntry(8, Epoch{Term: 3, Replica: 2}, from(rec("a", 2, 3), 6)),
		epochEntry(9, Epoch{Term: 2, Replica: 1}, from(rec("a", 2, 3), 6)),
	}
	if _, err := s.Update(ents); err != nil {
		t.Fatal(err)
	}
	for i, want := range []sm.Result{{Value: 5}, {Value: 6, Data: []byte{0b01100}}, {}, {}, {}} {
		if r := ents[i].Result; r.Value != want.Value || !bytes.Equal(r.Data, want.Data) {
			t.Errorf("entry %d result %+v, want %+v", ents[i].Index, r, want)
		}
	}
	for res, want := range map[string]Record{"a": stored(rec("a", 1, 2), 6), "b": stored(rec("b", 0, 1), 5), "c": stored(rec("c", 0, 1), 6)} {
		if got, _ := mustLoad(t, db, 3, res); !reflect.DeepEqual(got, want) {
			t.Errorf("%s = %+v, want %+v", res, got, want)
		}
	}
	if _, ok := mustLoad(t, db, 4, "a"); ok {
		t.Fatal("shard 4 sees shard 3's record")
	}
	if idx := applied(t, db, 3); idx != 9 {
		t.Fatalf("applied index %d, want 9", idx)
	}

	// Markers: an older or equal term is refused, a newer one (of any
	// replica) accepted, and from then on only its batches apply.
	ents = []sm.Entry{
		markerEntry(10, Epoch{Term: 2, Replica: 2}),
		markerEntry(11, Epoch{Term: 3, Replica: 2}),
		markerEntry(12, Epoch{Term: 4, Replica: 2}),
		entry(13, from(rec("a", 2, 3), 6)),
		epochEntry(14, Epoch{Term: 4, Replica: 2}, from(rec("a", 2, 3), 6)),
	}
	if _, err := s.Update(ents); err != nil {
		t.Fatal(err)
	}
	for i, want := range []uint64{0, 0, 12, 0, 14} {
		if r := ents[i].Result; r.Value != want || r.Data != nil {
			t.Errorf("entry %d result %+v, want Value %d", ents[i].Index, r, want)
		}
	}
	// A fresh state machine (cold order cache) reads the epoch and the
	// stored indexes back.
	cold := newStateMachine(db, 3, discard, false)
	if idx, err := cold.Open(nil); idx != 14 || err != nil || cold.epoch != (Epoch{Term: 4, Replica: 2}) {
		t.Fatalf("reopened at %d with epoch %+v: %v", idx, cold.epoch, err)
	}
	ents = []sm.Entry{epochEntry(15, cold.epoch, from(rec("a", 3, 4), 6), from(rec("a", 3, 4), 14))}
	if _, err := cold.Update(ents); err != nil {
		t.Fatal(err)
	}
	if r := ents[0].Result; r.Value != 15 || !bytes.Equal(r.Data, []byte{0b10}) {
		t.Fatalf("cold: result %+v, want only the write from base 14", r)
	}
}

// Entries written before the fence are replayed with the advance-only
// guard, and what they store is indexed like any other record.
func TestStateMachineLegacyEntries(t *testing.T) {
	db := memDB(t, 8<<20)
	s := newStateMachine(db, 3, discard, false)
	ents := []sm.Entry{
		legacyEntry(5, rec("a", 1, 1), rec("b", 1, 1)),
		legacyEntry(6, rec("a", 1, 1), rec("a", 0, 9), rec("a", 1, 2), rec("b", 2, 1)),
	}
	if _, err := s.Update(ents); err != nil {
		t.Fatal(err)
	}
	if r := ents[1].Result; r.Value != 6 || !bytes.Equal(r.Data, []byte{0b1100}) {
		t.Fatalf("entry 6 result %+v", r)
	}
	if got, _ := mustLoad(t, db, 3, "a"); !reflect.DeepEqual(got, stored(rec("a", 1, 2), 6)) {
		t.Fatalf("a = %+v", got)
	}
}

// The negative control: with the fence off, a batch of a stale epoch and a
// record from a stale base apply whenever (Token, Revision) advances.
func TestStateMachineUnsafeNoFence(t *testing.T) {
	db := memDB(t, 8<<20)
	s := newStateMachine(db, 3, discard, true)
	ents := []sm.Entry{
		markerEntry(4, Epoch{Term: 9, Replica: 1}),
		entry(5, rec("a", 0, 1)),
		entry(6, from(rec("a", 1, 2), 0)),
	}
	if _, err := s.Update(ents); err != nil {
		t.Fatal(err)
	}
	if got, _ := mustLoad(t, db, 3, "a"); !reflect.DeepEqual(got, stored(rec("a", 1, 2), 6)) {
		t.Fatalf("a = %+v", got)
	}
}

// A 1 MB memtable caps a badger txn at ~150 KB, so this Update must be split
// into several txns, each carrying the index of its last entry.
func TestStateMachineSplitsLargeUpdates(t *testing.T) {
	db := memDB(t, 1<<20)
	s := newStateMachine(db, 1, discard, false)
	if _, err := s.Update([]sm.Entry{markerEntry(99, testEpoch)}); err != nil {
		t.Fatal(err)
	}
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
		if e.Result.Value != e.Index || e.Result.Data != nil {
			t.Fatalf("entry %d: result %+v, want every record applied", i, e.Result)
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
	s := newStateMachine(src, 2, discard, false)
	var want []Record
	for i := range 600 {
		want = append(want, rec(fmt.Sprintf("res/%04d", i), int64(i+1), 1))
	}
	if _, err := s.Update([]sm.Entry{markerEntry(39, testEpoch), entry(40, want...)}); err != nil {
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
	other := newStateMachine(dst, 7, discard, false)
	d := newStateMachine(dst, 2, discard, false)
	if _, err := other.Update([]sm.Entry{markerEntry(2, testEpoch), entry(3, rec("keep", 1, 1))}); err != nil {
		t.Fatal(err)
	}
	ep := Epoch{Term: 99, Replica: 2}
	if _, err := d.Update([]sm.Entry{markerEntry(8, ep), epochEntry(9, ep, rec("stale", 5, 5), rec("res/0000", 99, 1))}); err != nil {
		t.Fatal(err)
	}
	if err := d.RecoverFromSnapshot(bytes.NewReader(buf.Bytes()), make(chan struct{})); err != nil {
		t.Fatal(err)
	}
	for _, r := range want {
		if got, ok := mustLoad(t, dst, 2, r.Resource); !ok || !reflect.DeepEqual(got, stored(r, 40)) {
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
	if idx, _ := d.Open(nil); idx != 40 || d.epoch != testEpoch {
		t.Fatalf("recovered applied index %d epoch %+v, want 40 and %+v", idx, d.epoch, testEpoch)
	}
	// The recovered state, not what d wrote before, fences later writes.
	next := []sm.Entry{entry(41, rec("stale", 0, 1), from(rec("res/0000", 1, 2), 40), from(rec("res/0001", 2, 1), 9))}
	if _, err := d.Update(next); err != nil {
		t.Fatal(err)
	}
	if r := next[0].Result; r.Value != 41 || !bytes.Equal(r.Data, []byte{0b011}) {
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
	s := newStateMachine(memDB(t, 8<<20), 1, discard, false)
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
		c.put(key(i), order{token: int64(i), revision: 1})
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
	c.put(key(19_999), order{token: 5, revision: 5}) // an update costs nothing more
	before := c.bytes
	c.put(key(19_999), order{token: 6, revision: 6})
	if c.bytes != before {
		t.Fatalf("update changed the size: %d → %d", before, c.bytes)
	}
	c.forget(key(19_999))
	c.forget(key(19_999)) // forgetting what is not cached costs nothing
	if _, ok := c.get(key(19_999)); ok || c.bytes != before-orderCacheCost(len(key(19_999))) {
		t.Fatalf("forget: %d bytes cached, want %d", c.bytes, before-orderCacheCost(len(key(19_999))))
	}
	c.clear()
	if _, ok := c.get(key(19_999)); ok || c.bytes != 0 {
		t.Fatal("clear kept entries")
	}
}

// removal is r as a Remove decided from the stored record at base.
func removal(r Record, base uint64) Record { r.Base, r.Remove = base, true; return r }

func floorOf(t *testing.T, db *badger.DB, shard uint64) int64 {
	t.Helper()
	var f int64
	if err := db.View(func(txn *badger.Txn) (err error) { f, err = readFloor(txnGetter{txn}, shard); return err }); err != nil {
		t.Fatal(err)
	}
	return f
}

// checkResults compares each entry's Result with want (Data nil: every
// record applied).
func checkResults(t *testing.T, ents []sm.Entry, want []sm.Result) {
	t.Helper()
	for i, w := range want {
		if r := ents[i].Result; r.Value != w.Value || !bytes.Equal(r.Data, w.Data) {
			t.Errorf("entry %d result %+v, want %+v", ents[i].Index, r, w)
		}
	}
}

// A Remove applies under a write's guard, only to a stored record; it
// deletes the record and raises the floor, which a first write must reach.
func TestStateMachineRemove(t *testing.T) {
	db := memDB(t, 8<<20)
	s := fencedSM(t, db)
	ents := []sm.Entry{
		entry(5, rec("a", 4, 1), rec("b", 9, 1), rec("c", 2, 1)),
		// a: from a stale base, never stored x, a lower token than a's
		// (all rejected), then from a's base (applied).
		entry(6, removal(rec("a", 4, 2), 0), removal(rec("x", 1, 1), 0), removal(rec("a", 3, 2), 5), removal(rec("a", 4, 2), 5)),
	}
	if _, err := s.Update(ents); err != nil {
		t.Fatal(err)
	}
	checkResults(t, ents, []sm.Result{{Value: 5}, {Value: 6, Data: []byte{0b1000}}})
	if got, ok := mustLoad(t, db, 3, "a"); ok || !reflect.DeepEqual(got, Record{Resource: "a", Token: 5}) {
		t.Fatalf("removed a: %+v found %v, want not found at token 5", got, ok)
	}
	if _, ok := s.orders.get([]byte("a")); ok {
		t.Fatal("the order cache still holds a")
	}
	if f := floorOf(t, db, 3); f != 5 || s.floor != 5 {
		t.Fatalf("floor %d (in memory %d), want 5", f, s.floor)
	}

	ents = []sm.Entry{
		// Below the floor: a again, and d never stored (rejected); a gone
		// (rejected); a at the floor (applied).
		entry(7, rec("a", 4, 1), rec("d", 4, 1), removal(rec("a", 4, 2), 5), rec("a", 5, 1)),
		// b raises the floor to 10, c's lower token leaves it there; in
		// the same batch c is granted again at the new floor.
		entry(8, removal(rec("b", 9, 2), 5), removal(rec("c", 2, 2), 5), rec("c", 10, 1)),
		// Another epoch: rejected.
		epochEntry(9, Epoch{Term: 3, Replica: 2}, removal(rec("a", 5, 2), 7)),
	}
	if _, err := s.Update(ents); err != nil {
		t.Fatal(err)
	}
	checkResults(t, ents, []sm.Result{{Value: 7, Data: []byte{0b1000}}, {Value: 8}, {}})
	if f := floorOf(t, db, 3); f != 10 || s.floor != 10 {
		t.Fatalf("floor %d (in memory %d), want 10", f, s.floor)
	}
	for res, want := range map[string]Record{"a": stored(rec("a", 5, 1), 7), "c": stored(rec("c", 10, 1), 8)} {
		if got, ok := mustLoad(t, db, 3, res); !ok || !reflect.DeepEqual(got, want) {
			t.Errorf("%s = %+v, want %+v", res, got, want)
		}
	}
	if got, ok := mustLoad(t, db, 3, "b"); ok || got.Token != 10 {
		t.Fatalf("b = %+v found %v, want not found at token 10", got, ok)
	}
	if f := floorOf(t, db, 4); f != 0 {
		t.Fatalf("shard 4 has floor %d", f)
	}

	// A fresh state machine reads the floor back.
	cold := newStateMachine(db, 3, discard, false)
	if _, err := cold.Open(nil); err != nil || cold.floor != 10 {
		t.Fatalf("reopened with floor %d: %v", cold.floor, err)
	}
	ents = []sm.Entry{entry(10, rec("e", 9, 1), rec("e", 10, 1))}
	if _, err := cold.Update(ents); err != nil {
		t.Fatal(err)
	}
	checkResults(t, ents, []sm.Result{{Value: 10, Data: []byte{0b10}}})
}

// Without the fence (switched off, or a legacy batch) a Remove applies to
// any stored record; the floor still passes the stored token, and writes
// ignore the floor as before.
func TestStateMachineRemoveUnfenced(t *testing.T) {
	for name, tc := range map[string]struct {
		noFence bool
		entry   func(uint64, ...Record) sm.Entry
	}{
		"no fence": {true, entry},
		"legacy":   {false, legacyEntry},
	} {
		t.Run(name, func(t *testing.T) {
			db := memDB(t, 8<<20)
			s := newStateMachine(db, 3, discard, tc.noFence)
			ents := []sm.Entry{
				tc.entry(5, rec("a", 4, 1)),
				// x is not stored (rejected); a from a stale base, with a
				// lower token (applied).
				tc.entry(6, removal(rec("x", 9, 1), 0), removal(rec("a", 1, 1), 3)),
				tc.entry(7, rec("a", 1, 1)),
			}
			if _, err := s.Update(ents); err != nil {
				t.Fatal(err)
			}
			checkResults(t, ents, []sm.Result{{Value: 5}, {Value: 6, Data: []byte{0b10}}, {Value: 7}})
			if f := floorOf(t, db, 3); f != 5 || s.floor != 5 {
				t.Fatalf("floor %d (in memory %d), want 5", f, s.floor)
			}
		})
	}
}

func TestStateMachineSnapshotFloor(t *testing.T) {
	src := memDB(t, 8<<20)
	s := fencedSM(t, src) // shard 3
	if _, err := s.Update([]sm.Entry{entry(2, rec("a", 7, 1), rec("b", 1, 1)), entry(3, removal(rec("a", 7, 2), 2))}); err != nil {
		t.Fatal(err)
	}
	view, err := s.PrepareSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := s.SaveSnapshot(view, &buf, make(chan struct{})); err != nil {
		t.Fatal(err)
	}
	if buf.Bytes()[0] != snapshotVersion {
		t.Fatalf("snapshot version %d", buf.Bytes()[0])
	}

	dst := memDB(t, 8<<20)
	d := newStateMachine(dst, 3, discard, false)
	if err := d.RecoverFromSnapshot(bytes.NewReader(buf.Bytes()), make(chan struct{})); err != nil {
		t.Fatal(err)
	}
	if f := floorOf(t, dst, 3); f != 8 || d.floor != 8 {
		t.Fatalf("recovered floor %d (in memory %d), want 8", f, d.floor)
	}
	if got, ok := mustLoad(t, dst, 3, "a"); ok || got.Token != 8 {
		t.Fatalf("a = %+v found %v, want not found at token 8", got, ok)
	}
	next := []sm.Entry{entry(4, rec("a", 7, 1), rec("a", 8, 1))}
	if _, err := d.Update(next); err != nil {
		t.Fatal(err)
	}
	checkResults(t, next, []sm.Result{{Value: 4, Data: []byte{0b10}}})

	// Streams of versions 1 and 2 have no floor: it reads as 0.
	c := rec("c", 3, 1)
	for _, ver := range []byte{snapshotVersionV2, snapshotVersionV1} {
		old := binary.AppendUvarint([]byte{ver}, 20)
		if ver == snapshotVersionV2 {
			old = binary.AppendUvarint(binary.AppendUvarint(old, testEpoch.Term), testEpoch.Replica)
		}
		val := appendStored(nil, appendValue(nil, &c), 20)
		old = binary.AppendUvarint(append(old, tagRecord), uint64(len(c.Resource)))
		old = binary.AppendUvarint(append(old, c.Resource...), uint64(len(val)))
		old = binary.AppendUvarint(append(append(old, val...), tagEnd), 1)
		if err := d.RecoverFromSnapshot(bytes.NewReader(old), make(chan struct{})); err != nil {
			t.Fatalf("version %d: %v", ver, err)
		}
		if f := floorOf(t, dst, 3); f != 0 || d.floor != 0 {
			t.Fatalf("version %d: floor %d (in memory %d), want 0", ver, f, d.floor)
		}
		if got, ok := mustLoad(t, dst, 3, "c"); !ok || !reflect.DeepEqual(got, stored(c, 20)) {
			t.Fatalf("version %d: c = %+v, %v", ver, got, ok)
		}
		if _, ok := mustLoad(t, dst, 3, "a"); ok {
			t.Fatalf("version %d: a survived recovery", ver)
		}
	}
	if err := d.RecoverFromSnapshot(bytes.NewReader([]byte{snapshotVersion + 1, 0}), make(chan struct{})); !errors.Is(err, errCorrupt) {
		t.Fatalf("unknown version: %v", err)
	}
}

// groupEntry is a group of epoch testEpoch: applied all or nothing.
func groupEntry(index uint64, recs ...Record) sm.Entry {
	b := appendBatchHeader(nil, kindGroup, testEpoch)
	for i := range recs {
		b = appendRecord(b, &recs[i])
	}
	setBatchCount(b, len(recs))
	return sm.Entry{Index: index, Cmd: b}
}

// A group applies every record or none: one the fence refuses (a stale
// base) refuses the others, which a batch would apply; a group of
// another epoch applies nothing. With UnsafeGroupApart (the negative
// control) the group applies record by record.
func TestStateMachineGroup(t *testing.T) {
	for _, apart := range []bool{false, true} {
		db := memDB(t, 8<<20)
		s := fencedSM(t, db)
		s.unsafeGroupApart = apart
		ents := []sm.Entry{
			entry(5, rec("a", 0, 1), rec("b", 0, 1)),
			groupEntry(6, from(rec("a", 1, 2), 5), from(rec("b", 1, 2), 4), rec("c", 0, 1)), // b's base is stale
			groupEntry(7, from(rec("a", 1, 2), 5), from(rec("b", 1, 2), 5), rec("c", 0, 1)),
			epochEntry(8, Epoch{Term: 3, Replica: 2}, from(rec("a", 2, 3), 7)), // decided in another epoch
		}
		ents[3].Cmd[0] = kindGroup
		if _, err := s.Update(ents); err != nil {
			t.Fatal(err)
		}
		want := []sm.Result{{Value: 5}, {}, {Value: 7}, {}}
		wantA := stored(rec("a", 1, 2), 7)
		if apart {
			want[1] = sm.Result{Value: 6, Data: []byte{0b101}}
			want[2] = sm.Result{Value: 7, Data: []byte{0b010}} // a and c were applied by entry 6
			wantA = stored(rec("a", 1, 2), 6)
		}
		checkResults(t, ents, want)
		if got, _ := mustLoad(t, db, 3, "a"); !reflect.DeepEqual(got, wantA) {
			t.Errorf("apart %v: a = %+v, want %+v", apart, got, wantA)
		}
	}
}
