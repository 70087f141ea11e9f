package durability

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	sm "github.com/lni/dragonboat/v4/statemachine"
)

// A leader that stops deciding for a partition on purpose hands its live
// ephemeral leases to the next one (Raft.HandOver). The next marker takes
// them only if that leader decided nothing ephemeral after the hand-over;
// else the next leader waits out the reign's bound, as without one.

var testLeases = []HandedLease{
	{Resource: "jobs/a", Owner: []byte("owner-a"), Token: 7, Revision: 3, Left: 4200 * time.Millisecond},
	{Resource: "jobs/b", Owner: []byte("owner-b"), Token: 1025, Revision: 1, Left: 900 * time.Millisecond},
}

func handoverEntry(index uint64, e Epoch, leases []HandedLease) sm.Entry {
	return sm.Entry{Index: index, Cmd: appendHandover(nil, e, appendLeases(nil, leases))}
}

func graceEntry(index uint64, e Epoch, ttlMs int64) sm.Entry {
	return sm.Entry{Index: index, Cmd: appendGrace(nil, e, ttlMs, graceRaise)}
}

func reachEntry(index uint64, e Epoch, reach int64) sm.Entry {
	return sm.Entry{Index: index, Cmd: appendReach(nil, e, reach)}
}

// shardState reads s's stored grace and hand-over.
func shardState(t *testing.T, s *stateMachine) (grace, handover) {
	t.Helper()
	var g grace
	var err error
	if g.reignMs, g.carriedMs, err = readGrace(s.view(), s.shard); err != nil {
		t.Fatal(err)
	}
	h, err := readHandover(s.view(), s.shard)
	if err != nil {
		t.Fatal(err)
	}
	return g, h
}

func update(t *testing.T, s *stateMachine, ents ...sm.Entry) {
	t.Helper()
	if _, err := s.Update(ents); err != nil {
		t.Fatal(err)
	}
}

func TestHandoverTakenByNextMarker(t *testing.T) {
	db := memDB(t, 8<<20)
	s := fencedSM(t, db)
	next := Epoch{Term: 4, Replica: 2}
	ents := []sm.Entry{graceEntry(2, testEpoch, 60_000), handoverEntry(3, testEpoch, testLeases), markerEntry(4, next)}
	update(t, s, ents...)
	if ents[1].Result.Value != 3 {
		t.Fatalf("hand-over in the stored epoch not accepted: %+v", ents[1].Result)
	}
	g, h := shardState(t, s)
	if h.state != handTaken || h.epoch != next {
		t.Fatalf("hand-over after the marker: state %d epoch %+v, want taken by %+v", h.state, h.epoch, next)
	}
	// Not the reign's one-minute bound: only the leases handed over, as
	// the new reign's own bound (for the leader after it).
	if g != (grace{reignMs: 4200}) {
		t.Fatalf("grace %+v, want the new reign bounded by the longest lease handed over (4200 ms), nothing carried", g)
	}
	got, err := decodeLeases(h.leases)
	if err != nil || !reflect.DeepEqual(got, testLeases) {
		t.Fatalf("leases taken %+v (%v), want %+v", got, err, testLeases)
	}

	// Reopened, the state machine knows it.
	cold := newStateMachine(db, 3, discard, false)
	if _, err := cold.Open(nil); err != nil {
		t.Fatal(err)
	}
	if cold.handed.state != handTaken || cold.handed.maxLeftMs != 4200 {
		t.Fatalf("reopened: %+v", cold.handed)
	}

	// The leader after that one takes nothing, and waits the leases out:
	// the taker's reign holds them, and handed none over itself.
	update(t, s, markerEntry(5, Epoch{Term: 5, Replica: 3}))
	g, h = shardState(t, s)
	if h.state != 0 || g != (grace{carriedMs: 4200}) {
		t.Fatalf("after a marker with no new hand-over: grace %+v hand-over state %d, want 4200 ms carried and none", g, h.state)
	}
}

func TestHandoverVoidedWhenTheLeaderServesAgain(t *testing.T) {
	for name, again := range map[string]func(uint64) sm.Entry{
		"reach": func(i uint64) sm.Entry { return reachEntry(i, testEpoch, 5000) },
		"grace": func(i uint64) sm.Entry { return graceEntry(i, testEpoch, 100) },
	} {
		t.Run(name, func(t *testing.T) {
			s := fencedSM(t, memDB(t, 8<<20))
			update(t, s, graceEntry(2, testEpoch, 60_000), handoverEntry(3, testEpoch, testLeases), again(4))
			if _, h := shardState(t, s); h.state != 0 {
				t.Fatalf("hand-over state %d after a %s entry of its epoch, want voided", h.state, name)
			}
			update(t, s, markerEntry(5, Epoch{Term: 4, Replica: 2}))
			g, h := shardState(t, s)
			if h.state != 0 || g.carriedMs != 60_000 {
				t.Fatalf("next leader: grace %+v hand-over state %d, want the reign's 60 s carried and nothing taken", g, h.state)
			}
		})
	}
}

func TestHandoverOfAnotherEpochRejected(t *testing.T) {
	s := fencedSM(t, memDB(t, 8<<20))
	stale := Epoch{Term: 2, Replica: 9}
	ents := []sm.Entry{handoverEntry(2, stale, testLeases)}
	update(t, s, ents...)
	if ents[0].Result.Value != 0 {
		t.Fatalf("stale hand-over accepted: %+v", ents[0].Result)
	}
	if _, h := shardState(t, s); h.state != 0 {
		t.Fatalf("stale hand-over stored: %+v", h)
	}
	// A later hand-over of the epoch replaces an earlier one.
	update(t, s, handoverEntry(3, testEpoch, testLeases), handoverEntry(4, testEpoch, testLeases[:1]))
	if _, h := shardState(t, s); h.state != handOffered || h.maxLeftMs != 4200 {
		t.Fatalf("hand-over %+v", h)
	}
	update(t, s, handoverEntry(5, testEpoch, nil))
	if _, h := shardState(t, s); h.state != handOffered || h.maxLeftMs != 0 {
		t.Fatalf("empty hand-over %+v, want offered with no lease", h)
	}
}

func TestHandoverInSnapshot(t *testing.T) {
	s := fencedSM(t, memDB(t, 8<<20))
	update(t, s, handoverEntry(2, testEpoch, testLeases))
	view, err := s.PrepareSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := s.SaveSnapshot(view, &buf, make(chan struct{})); err != nil {
		t.Fatal(err)
	}
	d := newStateMachine(memDB(t, 8<<20), 3, discard, false)
	if err := d.RecoverFromSnapshot(bytes.NewReader(buf.Bytes()), make(chan struct{})); err != nil {
		t.Fatal(err)
	}
	if d.handed.state != handOffered || d.handed.epoch != testEpoch || !bytes.Equal(d.handed.leases, s.handed.leases) {
		t.Fatalf("recovered hand-over %+v, want %+v", d.handed, s.handed)
	}
	// And the recovered one is taken by the next marker like the original.
	update(t, d, markerEntry(3, Epoch{Term: 4, Replica: 2}))
	if _, h := shardState(t, d); h.state != handTaken {
		t.Fatalf("recovered hand-over not taken: %+v", h)
	}
}

func TestDecodeLeasesRejectsBadInput(t *testing.T) {
	good := appendLeases(nil, testLeases)
	if got, err := decodeLeases(good); err != nil || !reflect.DeepEqual(got, testLeases) {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	for name, b := range map[string][]byte{
		"truncated":    good[:len(good)-1],
		"trailing":     append(append([]byte(nil), good...), 0),
		"empty":        nil,
		"huge count":   {0xff, 0xff, 0x03},
		"empty name":   appendLeases(nil, []HandedLease{{Owner: []byte("o"), Left: time.Second}}),
		"empty owner":  appendLeases(nil, []HandedLease{{Resource: "r", Left: time.Second}}),
		"negative":     appendLeases(nil, []HandedLease{{Resource: "r", Owner: []byte("o"), Token: -1}}),
		"negative ttl": appendLeases(nil, []HandedLease{{Resource: "r", Owner: []byte("o"), Left: -time.Second}}),
	} {
		if _, err := decodeLeases(b); err == nil {
			t.Errorf("%s: accepted", name)
		}
		if _, _, err := parseHeader(appendHandover(nil, testEpoch, b)); err == nil {
			t.Errorf("%s: entry accepted", name)
		}
	}
}
