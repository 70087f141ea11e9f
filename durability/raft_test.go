package durability

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/kahunago/kahuna/internal/testport"
	sm "github.com/lni/dragonboat/v4/statemachine"
)

// testWait bounds every wait on a signal, so a hang fails instead of
// stalling the run.
const testWait = 30 * time.Second

type chanCompletion chan error

func (c chanCompletion) Committed(_ uint64, err error) { c <- err }

// onceCompletion fails the test if it is completed twice.
type onceCompletion struct {
	t     testing.TB
	calls atomic.Int32
	err   error
	wg    *sync.WaitGroup
	onErr func(error) // optional, called before wg.Done
}

func (c *onceCompletion) Committed(_ uint64, err error) {
	if n := c.calls.Add(1); n != 1 {
		c.t.Errorf("completion called %d times (err %v)", n, err)
		return
	}
	c.err = err
	if c.onErr != nil {
		c.onErr(err)
	}
	c.wg.Done()
}

// node is a Raft under test with its leader events.
type node struct {
	*Raft
	events chan LeaderEvent

	mu     sync.Mutex
	fenced map[int]uint64 // partition → term this node fenced
}

// term fences partition p in the term this node leads it now (once per
// term) and returns that term: records proposed in it are tagged with it.
func (n *node) term(t testing.TB, p int) uint64 {
	t.Helper()
	deadline := time.Now().Add(testWait)
	for {
		id, term, ok, err := n.nh.GetLeaderID(shardID(p))
		if err == nil && ok && id == n.ReplicaID() {
			n.mu.Lock()
			done := n.fenced[p] == term
			n.mu.Unlock()
			if done {
				return term
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			err = n.Fence(ctx, p, term)
			cancel()
			if err == nil {
				n.mu.Lock()
				if n.fenced == nil {
					n.fenced = map[int]uint64{}
				}
				n.fenced[p] = term
				n.mu.Unlock()
				return term
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %d does not lead partition %d in a fenced term after %v (leader %d, %v)", n.ReplicaID(), p, testWait, id, err)
		}
		time.Sleep(n.cfg.RTT)
	}
}

// sameRecord compares records as stored, ignoring the proposal-only fields
// and the index the store assigns.
func sameRecord(got, want Record) bool {
	got.Base, got.Term, got.Index = 0, 0, 0
	want.Base, want.Term, want.Index = 0, 0, 0
	return reflect.DeepEqual(got, want)
}

func openNode(t testing.TB, cfg RaftConfig) *node {
	t.Helper()
	events := make(chan LeaderEvent, 1024)
	cfg.OnLeaderChange = func(e LeaderEvent) {
		select {
		case events <- e:
		default:
		}
	}
	r, err := OpenRaft(cfg)
	if err != nil {
		t.Fatalf("OpenRaft: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	return &node{Raft: r, events: events}
}

// awaitSelfLeader waits until this node leads every partition.
func (n *node) awaitSelfLeader(t testing.TB) {
	t.Helper()
	led := make(map[int]bool)
	timeout := time.After(testWait)
	for len(led) < n.Partitions() {
		select {
		case e := <-n.events:
			if e.IsSelf {
				led[e.Partition] = true
			}
		case <-timeout:
			t.Fatalf("leaders after %v: %v", testWait, led)
		}
	}
}

// propose commits r on n as a leader's decision would: in the term n
// fenced, from the record n has stored.
func propose(t testing.TB, n *node, p int, r Record) error {
	t.Helper()
	return proposeIn(t, n, p, n.term(t, p), r)
}

// proposeIn is propose in term, which n need not lead any more.
func proposeIn(t testing.TB, n *node, p int, term uint64, r Record) error {
	t.Helper()
	r.Term = term
	stored, _, err := n.Load(p, r.Resource)
	if err != nil {
		t.Fatal(err)
	}
	r.Base = stored.Index
	c := make(chanCompletion, 1)
	n.Propose(p, &r, c)
	select {
	case err := <-c:
		return err
	case <-time.After(testWait):
		t.Fatalf("no completion for %s after %v", r.Resource, testWait)
		return nil
	}
}

func TestSingleNodeInMemory(t *testing.T) {
	n := openNode(t, RaftConfig{Partitions: 4})
	n.awaitSelfLeader(t)
	first := rec("tenant/a/x", 3, 1)
	if err := propose(t, n, 1, first); err != nil {
		t.Fatalf("propose: %v", err)
	}
	got, ok, err := n.Load(1, first.Resource)
	if err != nil || !ok || !sameRecord(got, first) || got.Index == 0 {
		t.Fatalf("Load = %+v, %v, %v", got, ok, err)
	}
	if _, ok, _ := n.Load(2, first.Resource); ok {
		t.Fatal("partition 2 sees partition 1's record")
	}

	// Proposed back to back, so most share an entry; partition order makes
	// the outcome of each deterministic anyway: a record applies only from
	// the stored record it was decided from, in the fenced term.
	term, base := n.term(t, 1), got.Index
	at := func(r Record, base, term uint64) Record { r.Base, r.Term = base, term; return r }
	seq := []struct {
		r    Record
		want error
	}{
		{at(rec("tenant/a/x", 4, 2), base, term+1), ErrRetry}, // a term this node does not lead: never proposed
		{at(rec("tenant/a/x", 2, 9), base, term), ErrFenced},  // lower token
		{at(rec("tenant/a/x", 3, 2), base, term), nil},
		{at(rec("tenant/a/y", 1, 1), 0, term), nil},
		{at(rec("tenant/a/x", 3, 3), base, term), ErrFenced}, // x moved past base
		{at(rec("tenant/a/y", 1, 2), 0, term), ErrFenced},    // y exists now
	}
	comps := make([]chanCompletion, len(seq))
	for i := range seq {
		comps[i] = make(chanCompletion, 1)
		n.Propose(1, &seq[i].r, comps[i])
	}
	for i, c := range comps {
		select {
		case err := <-c:
			if !errors.Is(err, seq[i].want) || (seq[i].want == nil && err != nil) {
				t.Errorf("record %d: err %v, want %v", i, err, seq[i].want)
			}
		case <-time.After(testWait):
			t.Fatalf("record %d: no completion", i)
		}
	}
	got, _, _ = n.Load(1, "tenant/a/x")
	if want := seq[2].r; !sameRecord(got, want) || got.Index <= base {
		t.Fatalf("after sequence: %+v, want %+v at an index above %d", got, want, base)
	}
	if err := propose(t, n, 1, Record{Resource: "tenant/a/x", Token: 3, Revision: 3}); err != nil { // unlocked
		t.Fatal(err)
	}
	if err := n.Barrier(context.Background(), 1); err != nil {
		t.Fatalf("Barrier: %v", err)
	}
}

func TestPartitionOutOfRange(t *testing.T) {
	n := openNode(t, RaftConfig{Partitions: 2})
	c := make(chanCompletion, 1)
	n.Propose(2, &Record{Resource: "x"}, c)
	if err := <-c; !errors.Is(err, ErrRetry) || !errors.Is(err, errPartition) {
		t.Fatalf("Propose(2): %v", err)
	}
	if _, _, err := n.Load(-1, "x"); !errors.Is(err, errPartition) {
		t.Fatalf("Load(-1): %v", err)
	}
	if err := n.Barrier(context.Background(), 5); !errors.Is(err, errPartition) {
		t.Fatalf("Barrier(5): %v", err)
	}
	big := Record{Resource: "x", Owner: make([]byte, maxRecordBytes)}
	n.Propose(0, &big, c)
	if err := <-c; !errors.Is(err, ErrRetry) {
		t.Fatalf("oversized record: %v", err)
	}
}

func TestLeaderEventsSingleNode(t *testing.T) {
	n := openNode(t, RaftConfig{Partitions: 3, ReplicaID: 7})
	n.awaitSelfLeader(t) // fails unless IsSelf arrives for 0, 1 and 2
	for p := range 3 {
		leader, term, ok := n.LeaderID(p)
		if !ok || leader != 7 || term == 0 {
			t.Fatalf("LeaderID(%d) = %d, %d, %v", p, leader, term, ok)
		}
	}
	if n.ReplicaID() != 7 || n.Partitions() != 3 {
		t.Fatalf("ReplicaID %d Partitions %d", n.ReplicaID(), n.Partitions())
	}
}

func appliedIndexes(t testing.TB, r *Raft) []uint64 {
	t.Helper()
	out := make([]uint64, r.Partitions())
	for p := range out {
		m := r.machine(p)
		if m == nil {
			t.Fatalf("partition %d has no state machine", p)
		}
		out[p] = m.applied.Load()
	}
	return out
}

func TestOnDiskReopen(t *testing.T) {
	dir := t.TempDir()
	cfg := RaftConfig{Dir: dir, Partitions: 3}
	want := map[int]Record{
		0: {Resource: "a", Owner: []byte("alice"), ExpiresMs: 1_700_000_000_000, Token: 4, Revision: 10, Locked: true, LastModifiedMs: 1_699_999_999_000},
		2: {Resource: "b", Token: 9, Revision: 2, LastModifiedMs: 5},
	}
	n := openNode(t, cfg)
	n.awaitSelfLeader(t)
	for p, r := range want {
		if err := propose(t, n, p, r); err != nil {
			t.Fatal(err)
		}
	}
	before := appliedIndexes(t, n.Raft)
	if before[0] == 0 || before[2] == 0 {
		t.Fatalf("applied indexes %v", before)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}

	// Twice: the second reopen also checks that Close released the chan
	// transport's address and the directory locks.
	for round := range 2 {
		n = openNode(t, cfg)
		after := appliedIndexes(t, n.Raft)
		for p := range before {
			if after[p] < before[p] {
				t.Fatalf("round %d: applied index of %d went from %d to %d", round, p, before[p], after[p])
			}
		}
		for p, r := range want {
			got, ok, err := n.Load(p, r.Resource)
			if err != nil || !ok || !sameRecord(got, r) {
				t.Fatalf("round %d: Load(%d, %s) = %+v, %v, %v", round, p, r.Resource, got, ok, err)
			}
		}
		n.awaitSelfLeader(t)
		r := want[0]
		r.Revision++
		if err := propose(t, n, 0, r); err != nil {
			t.Fatalf("round %d: propose after reopen: %v", round, err)
		}
		want[0] = r
		before = appliedIndexes(t, n.Raft)
		if err := n.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSameDirTwiceFails(t *testing.T) {
	dir := t.TempDir()
	n := openNode(t, RaftConfig{Dir: dir, Partitions: 1})
	if r, err := OpenRaft(RaftConfig{Dir: dir, Partitions: 1}); err == nil {
		r.Close()
		t.Fatal("second OpenRaft on a dir in use succeeded")
	} else {
		t.Logf("second open: %v", err)
	}
	n.awaitSelfLeader(t)
	if err := propose(t, n, 0, rec("x", 1, 1)); err != nil {
		t.Fatalf("first node broken by the failed open: %v", err)
	}
}

func TestTwoSingleNodesInOneProcess(t *testing.T) {
	a := openNode(t, RaftConfig{Dir: t.TempDir(), Partitions: 1})
	b := openNode(t, RaftConfig{Dir: t.TempDir(), Partitions: 1})
	if a.cfg.selfAddr == b.cfg.selfAddr {
		t.Fatalf("both nodes got address %s", a.cfg.selfAddr)
	}
	a.awaitSelfLeader(t)
	b.awaitSelfLeader(t)
	if err := propose(t, a, 0, rec("only-a", 1, 1)); err != nil {
		t.Fatal(err)
	}
	if err := propose(t, b, 0, rec("only-b", 1, 1)); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := b.Load(0, "only-a"); ok {
		t.Fatal("b sees a's record")
	}
	if _, ok, _ := a.Load(0, "only-a"); !ok {
		t.Fatal("a lost its record")
	}
}

func TestSyntheticAddressStable(t *testing.T) {
	a1, a2, b := syntheticAddr("/x/y"), syntheticAddr("/x/y"), syntheticAddr("/x/z")
	if a1 != a2 || a1 == b {
		t.Fatalf("dir-derived addresses %s %s %s", a1, a2, b)
	}
	if m1, m2 := syntheticAddr(""), syntheticAddr(""); m1 == m2 {
		t.Fatalf("in-memory addresses repeat: %s", m1)
	}
}

func TestConcurrentPropose(t *testing.T) {
	const (
		workers = 32
		each    = 100
		parts   = 4
	)
	n := openNode(t, RaftConfig{Partitions: parts})
	n.awaitSelfLeader(t)
	terms := make([]uint64, parts)
	for p := range terms {
		terms[p] = n.term(t, p)
	}
	var wg sync.WaitGroup
	comps := make([]*onceCompletion, workers*each)
	wg.Add(len(comps))
	var prod sync.WaitGroup
	for w := range workers {
		prod.Add(1)
		go func() {
			defer prod.Done()
			for i := range each {
				c := &onceCompletion{t: t, wg: &wg}
				comps[w*each+i] = c
				r := rec(fmt.Sprintf("w%d-%d", w, i), 1, 1)
				r.Term = terms[w%parts]
				n.Propose(w%parts, &r, c)
			}
		}()
	}
	prod.Wait()
	waitGroup(t, &wg)
	for i, c := range comps {
		if c.err != nil {
			t.Fatalf("record %d: %v", i, c.err)
		}
	}
	for w := range workers {
		for i := range each {
			if _, ok, _ := n.Load(w%parts, fmt.Sprintf("w%d-%d", w, i)); !ok {
				t.Fatalf("w%d-%d missing", w, i)
			}
		}
	}
}

func waitGroup(t testing.TB, wg *sync.WaitGroup) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(testWait):
		t.Fatalf("completions still missing after %v", testWait)
	}
}

func TestCloseWithProposalsInFlight(t *testing.T) {
	n := openNode(t, RaftConfig{Dir: t.TempDir(), Partitions: 4})
	n.awaitSelfLeader(t)
	terms := make([]uint64, 4)
	for p := range terms {
		terms[p] = n.term(t, p)
	}
	var (
		wg      sync.WaitGroup
		prod    sync.WaitGroup
		mu      sync.Mutex
		comps   []*onceCompletion
		applied atomic.Int64
	)
	stop := make(chan struct{})
	busy := make(chan struct{}) // closed once proposals are flowing
	var busyOnce sync.Once
	onErr := func(err error) {
		if err == nil && applied.Add(1) == 1000 {
			busyOnce.Do(func() { close(busy) })
		}
	}
	for w := range 16 {
		prod.Add(1)
		go func() {
			defer prod.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				c := &onceCompletion{t: t, wg: &wg, onErr: onErr}
				wg.Add(1)
				mu.Lock()
				comps = append(comps, c)
				mu.Unlock()
				r := rec(fmt.Sprintf("w%d-%d", w, i), 1, 1)
				r.Term = terms[w%4]
				n.Propose(w%4, &r, c)
			}
		}()
	}
	select {
	case <-busy:
	case <-time.After(testWait):
		t.Fatal("producers stalled")
	}
	if err := n.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	close(stop)
	prod.Wait()
	waitGroup(t, &wg)
	var ok, closed int
	kinds := map[string]int{}
	for _, c := range comps {
		if c.err != nil {
			kinds[c.err.Error()]++
		}
		switch err := c.err; {
		case err == nil:
			ok++
		case errors.Is(err, ErrClosed) && (errors.Is(err, ErrRetry) || errors.Is(err, ErrUnknownOutcome)):
			closed++
		case errors.Is(err, ErrRetry), errors.Is(err, ErrUnknownOutcome):
		default:
			t.Errorf("unexpected outcome %v", err)
		}
	}
	t.Logf("%d proposals: %d applied, %d refused as closed: %v", len(comps), ok, closed, kinds)
	if ok == 0 || closed == 0 {
		t.Fatalf("want both applied and closed outcomes, got %d and %d", ok, closed)
	}
	if err := n.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, _, err := n.Load(0, "w0"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Load after Close: %v", err)
	}
	if err := n.Barrier(context.Background(), 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("Barrier after Close: %v", err)
	}
	if _, _, ok := n.LeaderID(0); ok {
		t.Fatal("LeaderID after Close reports a leader")
	}
}

func TestSingleNodeTCP(t *testing.T) {
	l := testport.Listen(t)
	addr := l.Addr().String()
	n := openNode(t, RaftConfig{RaftAddress: addr, Listener: l, Partitions: 2})
	if n.cfg.inProc {
		t.Fatal("TCP address configured but in-process transport chosen")
	}
	n.awaitSelfLeader(t)
	if err := propose(t, n, 1, rec("tcp", 1, 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenRaft(RaftConfig{RaftAddress: addr, Members: map[uint64]string{1: "127.0.0.1:1"}}); err == nil {
		t.Fatal("members disagreeing with RaftAddress accepted")
	}
}

// A Listener the transport would not serve on is refused, and every
// failed OpenRaft closes the Listener it took over.
func TestListenerRefusedAndClosed(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		cfg  func(l net.Listener) RaftConfig
		want string
	}{
		"in-process": {func(l net.Listener) RaftConfig { return RaftConfig{Listener: l} }, "needs kahuna's TCP transport"},
		"own transport": {func(l net.Listener) RaftConfig {
			return RaftConfig{RaftAddress: l.Addr().String(), Listener: l, Transport: &chanFactory{}}
		}, "needs kahuna's TCP transport"},
		"other port": {func(l net.Listener) RaftConfig { return RaftConfig{RaftAddress: "127.0.0.1:1", Listener: l} }, "not at RaftAddress"},
		"data dir a file": {func(l net.Listener) RaftConfig {
			return RaftConfig{Dir: file, RaftAddress: l.Addr().String(), Listener: l}
		}, file},
	} {
		l := testport.Listen(t)
		if r, err := OpenRaft(c.cfg(l)); err == nil || !strings.Contains(err.Error(), c.want) {
			if r != nil {
				r.Close()
			}
			t.Errorf("%s: OpenRaft = %v, want an error with %q", name, err, c.want)
		}
		if !testport.Closed(l) {
			t.Errorf("%s: listener left open by the failed OpenRaft", name)
		}
	}
}

// A single node founds on a fresh data dir and restarts on its own with no
// InitialClusterState; "new" restarts too; "existing" refuses a fresh one.
func TestSingleNodeClusterStates(t *testing.T) {
	dir := t.TempDir()
	r := rec("single", 1, 1)
	for i, state := range []ClusterState{"", "", ClusterStateNew, ClusterStateExisting} {
		n := openNode(t, RaftConfig{Dir: dir, Partitions: 1, InitialClusterState: state})
		n.awaitSelfLeader(t)
		if i == 0 {
			if err := propose(t, n, 0, r); err != nil {
				t.Fatal(err)
			}
		} else if got, ok, err := n.Load(0, r.Resource); err != nil || !ok || !sameRecord(got, r) {
			t.Fatalf("start %d (state %q): Load = %+v, %v, %v", i, state, got, ok, err)
		}
		if err := n.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if got, _, err := recordedDeploymentID(filepath.Join(dir, "raft")); err != nil || got != singleDeploymentID {
		t.Fatalf("single node recorded deployment ID %d (%v), want the constant %d", got, err, uint64(singleDeploymentID))
	}
	fresh := t.TempDir()
	if n, err := OpenRaft(RaftConfig{Dir: fresh, Partitions: 1, InitialClusterState: ClusterStateExisting}); err == nil {
		n.Close()
		t.Fatal("existing on a fresh data dir opened")
	} else if !errors.Is(err, ErrNoRaftState) || !strings.Contains(err.Error(), fresh) {
		t.Fatalf("existing on a fresh data dir: %v", err)
	}
	if n, err := OpenRaft(RaftConfig{InitialClusterState: ClusterStateExisting}); err == nil {
		n.Close()
		t.Fatal("existing in memory opened")
	}
}

func TestDeploymentIDFor(t *testing.T) {
	one := map[uint64]string{1: "a:1"}
	three := map[uint64]string{1: "a:1", 2: "b:1", 3: "c:1"}
	if got := deploymentIDFor("", one); got != singleDeploymentID {
		t.Fatalf("single node without token: %d, want the constant", got)
	}
	ids := map[uint64]string{}
	for _, c := range []struct {
		name    string
		token   string
		members map[uint64]string
	}{
		{"single with token", "t", one},
		{"three", "", three},
		{"three with token", "t", three},
		{"three, another address", "", map[uint64]string{1: "a:1", 2: "b:1", 3: "d:1"}},
		{"three, other IDs", "", map[uint64]string{1: "a:1", 2: "b:1", 4: "c:1"}},
		{"two", "", map[uint64]string{1: "a:1", 2: "b:1"}},
	} {
		d := deploymentIDFor(c.token, c.members)
		if d <= 1 || d == singleDeploymentID {
			t.Errorf("%s: deployment ID %d", c.name, d)
		}
		if prev, dup := ids[d]; dup {
			t.Errorf("%s and %s share deployment ID %d", c.name, prev, d)
		}
		ids[d] = c.name
		for range 20 { // map order does not matter
			if again := deploymentIDFor(c.token, maps.Clone(c.members)); again != d {
				t.Fatalf("%s: %d then %d", c.name, d, again)
			}
		}
	}
	if deploymentIDFor("", map[uint64]string{1: " A:1", 2: "b:1", 3: "C:1 "}) != deploymentIDFor("", three) {
		t.Error("addresses differing in case or spaces (the same to dragonboat) give different IDs")
	}
}

// Released pages through a partition's records: only those free long
// enough, in key order, none twice across pages; limit and an early stop
// end it.
func TestReleased(t *testing.T) {
	db := memDB(t, 8<<20)
	r := &Raft{db: db, log: discard, lanes: make([]*lane, 3)}
	s := newStateMachine(db, shardID(1), discard, true)
	const cutoff = 100
	var recs, want []Record
	for i := range 1000 {
		res := fmt.Sprintf("r%04d", i)
		var rc Record
		// Free ones at each multiple of 256, where pages end.
		switch i % 4 {
		case 0: // unlocked at the cutoff
			rc = Record{Resource: res, Token: 1, Revision: 1, LastModifiedMs: cutoff}
		case 1: // expired at the cutoff, though modified after it
			rc = Record{Resource: res, Owner: []byte("o" + res), Token: 2, Revision: 1, Locked: true, ExpiresMs: cutoff, LastModifiedMs: cutoff + 5}
		case 2: // unlocked too recently
			rc = Record{Resource: res, Token: 1, Revision: 1, LastModifiedMs: cutoff + 1}
		case 3: // locked past the cutoff, though modified before it
			rc = Record{Resource: res, Owner: []byte("o"), Token: 2, Revision: 1, Locked: true, ExpiresMs: cutoff + 1}
		}
		recs = append(recs, rc)
		if i%4 < 2 {
			want = append(want, stored(rc, 5))
		}
	}
	if _, err := s.Update([]sm.Entry{entry(5, recs...)}); err != nil {
		t.Fatal(err)
	}
	// Another partition's free record, and a corrupt one, are never given.
	other := newStateMachine(db, shardID(2), discard, true)
	if _, err := other.Update([]sm.Entry{entry(5, rec("z", 0, 1))}); err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(txn *badger.Txn) error {
		return txn.Set(recordKey(nil, shardID(1), []byte("r9999")), []byte{0xff})
	}); err != nil {
		t.Fatal(err)
	}

	scan := func(limit, stopAt int) []Record {
		t.Helper()
		var got []Record
		err := r.Released(1, cutoff, "", limit, func(rc Record) bool {
			got = append(got, rc)
			return len(got) != stopAt
		})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := scan(0, 0); !reflect.DeepEqual(got, want) {
		t.Fatalf("every free record: got %d, want %d (first %+v)", len(got), len(want), got[:min(len(got), 2)])
	}
	for _, c := range []struct{ limit, stopAt, want int }{{10, 0, 10}, {300, 0, 300}, {0, 7, 7}, {300, 260, 260}, {len(want) + 5, 0, len(want)}} {
		if got := scan(c.limit, c.stopAt); !reflect.DeepEqual(got, want[:c.want]) {
			t.Errorf("limit %d, stop at %d: %d records, want the first %d", c.limit, c.stopAt, len(got), c.want)
		}
	}
	if got := scan(0, 0); len(got) != len(want) {
		t.Fatal("a scan changed what is stored")
	}
	// From after a resource: the free records past it, whether it is one
	// (r0300 is free) or not (r0302 is unlocked too recently).
	for _, c := range []struct {
		after string
		from  int // index in want
	}{{"r0300", 151}, {"r0302", 152}, {"r0999", len(want)}} {
		var got []Record
		if err := r.Released(1, cutoff, c.after, 20, func(rc Record) bool { got = append(got, rc); return true }); err != nil {
			t.Fatal(err)
		}
		if w := want[c.from:min(c.from+20, len(want))]; len(got) != len(w) || len(w) > 0 && !reflect.DeepEqual(got, w) {
			t.Errorf("after %s: %d records from %v, want %d from %v", c.after, len(got), got[:min(len(got), 1)], len(w), w[:min(len(w), 1)])
		}
	}
	if err := r.Released(3, cutoff, "", 0, func(Record) bool { return true }); !errors.Is(err, errPartition) {
		t.Fatalf("partition out of range: %v", err)
	}
	r.dbClosed = true
	if err := r.Released(1, cutoff, "", 0, func(Record) bool { return true }); !errors.Is(err, ErrClosed) {
		t.Fatalf("closed: %v", err)
	}
}

// Held lists the records held at now whose names start with a prefix, in
// name order after a cursor, across read pages: not the expired, the
// unlocked, another partition's, a corrupt one, nor a name just outside
// the prefix; paging by the last name given returns each once.
func TestHeld(t *testing.T) {
	db := memDB(t, 8<<20)
	r := &Raft{db: db, log: discard, lanes: make([]*lane, 3)}
	s := newStateMachine(db, shardID(1), discard, true)
	const now = 1000
	var recs, want []Record
	for i := range 700 { // more than two read pages
		res := fmt.Sprintf("jobs/%04d", i)
		rc := Record{Resource: res, Owner: []byte("o" + res), Token: int64(i), Revision: 1, Locked: true, ExpiresMs: now + int64(i%3)}
		switch i % 5 {
		case 1: // expired just before now
			rc.ExpiresMs = now - 1
		case 2: // released
			rc.Locked, rc.Owner = false, nil
		}
		recs = append(recs, rc)
		if i%5 != 1 && i%5 != 2 {
			want = append(want, stored(rc, 5))
		}
	}
	held := func(res string) Record {
		return Record{Resource: res, Owner: []byte("o"), Token: 1, Revision: 1, Locked: true, ExpiresMs: now + 5}
	}
	// Just outside the prefix "jobs/": before and after it in key order.
	recs = append(recs, held("jobs"), held("jobs."), held("jobs0"), held("job"))
	if _, err := s.Update([]sm.Entry{entry(5, recs...)}); err != nil {
		t.Fatal(err)
	}
	other := newStateMachine(db, shardID(2), discard, true)
	if _, err := other.Update([]sm.Entry{entry(5, held("jobs/0000x"))}); err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(txn *badger.Txn) error {
		return txn.Set(recordKey(nil, shardID(1), []byte("jobs/0000y")), []byte{0xff})
	}); err != nil {
		t.Fatal(err)
	}

	all, err := r.Held(1, "jobs/", "", now, 10000)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(all, want) {
		t.Fatalf("held under jobs/: got %d records, want %d (first %+v)", len(all), len(want), all[:min(len(all), 2)])
	}
	// Pages of 7 by the last name given: the same records, once each.
	var paged []Record
	for after := ""; ; {
		page, err := r.Held(1, "jobs/", after, now, 7)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > 7 {
			t.Fatalf("page of %d records, limit 7", len(page))
		}
		if len(page) == 0 {
			break
		}
		paged = append(paged, page...)
		after = page[len(page)-1].Resource
	}
	if !reflect.DeepEqual(paged, want) {
		t.Fatalf("paged: got %d records, want %d", len(paged), len(want))
	}
	// A cursor before the prefix starts at its first name; one past it ends.
	if got, err := r.Held(1, "jobs/", "a", now, 1); err != nil || len(got) != 1 || got[0].Resource != want[0].Resource {
		t.Fatalf("cursor before the prefix: %+v, %v", got, err)
	}
	if got, err := r.Held(1, "jobs/", "jobs0", now, 10); err != nil || len(got) != 0 {
		t.Fatalf("cursor past the prefix: %+v, %v", got, err)
	}
	// The empty prefix: every held name of the partition, outside ones too.
	if got, err := r.Held(1, "", "", now, 10000); err != nil || len(got) != len(want)+4 {
		t.Fatalf("every held record: %d, %v; want %d", len(got), err, len(want)+4)
	}
	// A lease is live up to and including its expiry.
	if got, err := r.Held(1, "jobs/0000", "", now+1, 10); err != nil || len(got) != 0 {
		t.Fatalf("jobs/0000 (expiring at %d) held at %d: %+v, %v", now, now+1, got, err)
	}
	if err := func() error { _, err := r.Held(3, "", "", now, 1); return err }(); !errors.Is(err, errPartition) {
		t.Fatalf("partition out of range: %v", err)
	}
	r.dbClosed = true
	if _, err := r.Held(1, "", "", now, 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("closed: %v", err)
	}
}

// Through Raft: a Remove decided from the stored record deletes it, and
// Load then gives the floor, which a new grant must reach.
func TestRemoveSingleNode(t *testing.T) {
	n := openNode(t, RaftConfig{Partitions: 2})
	n.awaitSelfLeader(t)
	x := rec("x", 5, 1)
	if err := propose(t, n, 1, x); err != nil {
		t.Fatal(err)
	}
	free := Record{Resource: "y", Token: 3, Revision: 2, LastModifiedMs: 10}
	if err := propose(t, n, 1, free); err != nil {
		t.Fatal(err)
	}
	var released []Record
	if err := n.Released(1, 10, "", 0, func(r Record) bool { released = append(released, r); return true }); err != nil {
		t.Fatal(err)
	}
	if len(released) != 1 || !sameRecord(released[0], free) || released[0].Index == 0 {
		t.Fatalf("released %+v, want y", released)
	}
	gone := removal(rec("x", 5, 2), 0) // propose sets Base from the stored x
	if err := propose(t, n, 1, gone); err != nil {
		t.Fatalf("remove x: %v", err)
	}
	got, ok, err := n.Load(1, "x")
	if err != nil || ok || !reflect.DeepEqual(got, Record{Resource: "x", Token: 6}) {
		t.Fatalf("Load after remove = %+v, %v, %v; want not found at token 6", got, ok, err)
	}
	if f, err := n.TokenFloor(1); f != 6 || err != nil {
		t.Fatalf("TokenFloor(1) = %d, %v", f, err)
	}
	if f, err := n.TokenFloor(0); f != 0 || err != nil {
		t.Fatalf("TokenFloor(0) = %d, %v", f, err)
	}
	for _, c := range []struct {
		r    Record
		want error
	}{
		{gone, ErrFenced},                       // nothing stored any more
		{rec("x", 5, 1), ErrFenced},             // below the floor
		{rec("x", 6, 1), nil},                   // at it
		{removal(rec("x", 5, 2), 0), ErrFenced}, // a lower token than stored
	} {
		if err := propose(t, n, 1, c.r); !errors.Is(err, c.want) || (c.want == nil && err != nil) {
			t.Errorf("%+v: %v, want %v", c.r, err, c.want)
		}
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := n.TokenFloor(1); !errors.Is(err, ErrClosed) {
		t.Fatalf("TokenFloor after Close: %v", err)
	}
	if err := n.Released(1, 10, "", 0, func(Record) bool { return true }); !errors.Is(err, ErrClosed) {
		t.Fatalf("Released after Close: %v", err)
	}
}

// Stats.Wait and Stats.Commit account for each settled entry: the time its
// records waited for a free slot and the time Raft took, neither more than
// the proposers saw.
func TestStatsWaitAndCommit(t *testing.T) {
	n := openNode(t, RaftConfig{Partitions: 1, inFlight: 1, batchRecords: 5})
	n.awaitSelfLeader(t)
	term := n.term(t, 0)
	before := n.Stats()

	// One record at a time: nothing waits behind another entry.
	var walls time.Duration
	for i := range 5 {
		start := time.Now()
		if err := propose(t, n, 0, rec(fmt.Sprintf("alone-%d", i), 1, 1)); err != nil {
			t.Fatal(err)
		}
		walls += time.Since(start)
	}
	alone := n.Stats()
	if got := alone.Proposals - before.Proposals; got != 5 {
		t.Fatalf("%d entries settled, want 5", got)
	}
	commit, wait := alone.Commit-before.Commit, alone.Wait-before.Wait
	if commit <= 0 || commit+wait > walls {
		t.Fatalf("Commit %v and Wait %v for proposals that took %v in all", commit, wait, walls)
	}

	// A burst of four entries' worth with one in flight: the entries
	// behind the first wait for it to settle.
	var wg sync.WaitGroup
	const burst = 20
	wg.Add(burst)
	start := time.Now()
	for i := range burst {
		r := rec(fmt.Sprintf("burst-%d", i), 1, 1)
		r.Term = term
		n.Propose(0, &r, &onceCompletion{t: t, wg: &wg})
	}
	waitGroup(t, &wg)
	took := time.Since(start)
	after := n.Stats()
	entries := after.Proposals - alone.Proposals
	if entries < burst/5 {
		t.Fatalf("%d entries for a burst of %d records with one in flight", entries, burst)
	}
	wait, commit = after.Wait-alone.Wait, after.Commit-alone.Commit
	if wait <= 0 || commit <= 0 || wait > time.Duration(entries)*took || commit > time.Duration(entries)*took {
		t.Fatalf("burst of %v in %d entries: Wait %v, Commit %v", took, entries, wait, commit)
	}
}

// statsCompletion reads the backend's Stats as its answer arrives.
type statsCompletion struct {
	r   *Raft
	got chan Stats
}

func (c statsCompletion) Committed(uint64, error) { c.got <- c.r.Stats() }

// A record's answer goes out after Stats counts it: a caller holding the
// answer of a committed write finds it among Records (and a refused one
// among Failures).
func TestStatsCountARecordBeforeItsAnswer(t *testing.T) {
	n := openNode(t, RaftConfig{Partitions: 1})
	n.awaitSelfLeader(t)
	for i := range 3 {
		r := Record{Resource: fmt.Sprint("counted-", i), Owner: []byte("o"), Token: 1, Revision: 1, Locked: true, Term: n.term(t, 0)}
		c := statsCompletion{r: n.Raft, got: make(chan Stats, 1)}
		n.Propose(0, &r, c)
		select {
		case s := <-c.got:
			if s.Records != uint64(i+1) {
				t.Fatalf("record %d answered while Stats counted %d records", i, s.Records)
			}
		case <-time.After(testWait):
			t.Fatal("no answer")
		}
	}
}
