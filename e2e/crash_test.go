package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/checker"
	"github.com/kahunago/kahuna/internal/testport"
)

// crashTTL is the lease of the crash test's grants: far longer than the
// test, so a grant lapses only if it is lost.
const crashTTL = time.Hour

// TestCrashDurability runs the kahuna binary, drives persistent locks
// through the Go client, kills it with SIGKILL at random moments and
// restarts it on the same data dir. After every restart each acknowledged
// grant is still there with its owner and token (unless an operation whose
// answer the crash swallowed released it), and the whole history across
// the crashes passes the linearizability, exclusion and fencing checkers:
// in particular every grant after a crash has a larger token than every
// grant acknowledged before it.
func TestCrashDurability(t *testing.T) {
	t.Parallel()
	findings, undecided := crashRun(t, build(t))
	for _, f := range findings {
		t.Error(f)
	}
	if undecided != "" {
		t.Error(undecided) // not a pass
	}
}

// TestCrashDurabilityNegativeControl runs the same crashes against a node
// whose state machine stores the applied index ahead of the records it
// covers (KAHUNA_UNSAFE=applied-first): a crash then loses records the
// node had acknowledged, and the checks above must say so.
func TestCrashDurabilityNegativeControl(t *testing.T) {
	t.Parallel()
	// Only definite findings count: a linearizability search that timed
	// out saw nothing either way.
	findings, undecided := crashRun(t, buildUnsafe(t, "applied-first"))
	if len(findings) == 0 {
		if undecided != "" {
			t.Fatalf("the broken variant lost nothing the checks surely saw (%s): the crash test cannot see a lost write", undecided)
		}
		t.Fatal("the broken variant lost nothing the checks saw: the crash test cannot see a lost write")
	}
	t.Logf("the broken variant was caught (%d findings), the first: %s", len(findings), findings[0])
}

// crashRun is the crash test against bin; it returns what it surely found
// wrong, and, if the checkers' linearizability search timed out even when
// searched again, why the history is undecided ("" if it is not).
func crashRun(t *testing.T, bin binaries) (findings []string, undecided string) {
	t.Helper()
	var findingsMu sync.Mutex
	fail := func(format string, args ...any) {
		findingsMu.Lock()
		findings = append(findings, fmt.Sprintf(format, args...))
		findingsMu.Unlock()
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("KAHUNA_CRASH_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (replay the schedule: KAHUNA_CRASH_SEED=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))

	dataDir := t.TempDir()
	httpPort, grpcPort, raftPort := testport.Port(t), testport.Port(t), testport.Port(t)
	args := []string{
		"--http-ports", strconv.Itoa(httpPort),
		"--grpc-cleartext-ports", strconv.Itoa(grpcPort),
		"--raft-port", strconv.Itoa(raftPort),
		"--storage-path", dataDir,
		"--initial-cluster-partitions", "2",
		"--log-level", "warn",
	}
	endpoint := "http://127.0.0.1:" + strconv.Itoa(httpPort)

	const (
		workers = 4
		crashes = 4
	)
	rec := checker.NewRecorder()
	var (
		mu     sync.Mutex
		client *kahuna.Client // the current one; replaced after each restart
		epoch  atomic.Int64   // bumped on each restart
	)
	current := func() *kahuna.Client {
		mu.Lock()
		defer mu.Unlock()
		return client
	}
	dial := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := kahuna.Dial(ctx, []string{endpoint}, kahuna.WithMustRetryBudget(time.Second))
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		mu.Lock()
		old := client
		client = c
		mu.Unlock()
		if old != nil {
			old.Close()
		}
		epoch.Add(1)
	}

	// call runs one recorded operation on the current client.
	call := func(w int, kind checker.Kind, res, owner string) checker.Op {
		c := current()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		p := rec.Begin(checker.Op{Client: w, Kind: kind, Resource: res, Owner: owner, TTL: map[bool]time.Duration{true: crashTTL}[kind == checker.Acquire]})
		switch kind {
		case checker.Acquire:
			r, err := c.TryLock(ctx, res, []byte(owner), crashTTL, kahuna.Persistent)
			return p.End(r.Status, r.FencingToken, err)
		case checker.Release:
			r, err := c.Unlock(ctx, res, []byte(owner), kahuna.Persistent)
			return p.End(r.Status, r.FencingToken, err)
		default:
			info, r, err := c.Get(ctx, res, kahuna.Persistent)
			return p.EndGet(r.Status, r.FencingToken, string(info.Owner), err)
		}
	}

	// Each worker owns its resources and cycles grant → release on them
	// with a fresh owner per grant, so it always knows the state a
	// resource must be in, up to its one operation whose answer a crash
	// swallowed.
	type grant struct {
		owner string
		token int64
	}
	type resState struct {
		held     *grant // the last acknowledged grant, if not released since
		maxToken int64  // largest acknowledged token (-1: none)
		unknown  string // owner of an acquire or release of unknown outcome
	}
	var stateMu sync.Mutex
	states := map[string]*resState{}
	resources := func(w int) []string { return []string{fmt.Sprintf("crash/w%d/a", w), fmt.Sprintf("crash/w%d/b", w)} }
	for w := 0; w < workers; w++ {
		for _, r := range resources(w) {
			states[r] = &resState{maxToken: -1}
		}
	}

	// notSent: the call failed before its request left (the node is down):
	// nothing happened, the resource is as it was.
	notSent := func(op checker.Op) bool { return op.Outcome == checker.Fail && op.Err != "" }

	// step is one step of worker w on one of its resources.
	step := func(w, n int, wrng *rand.Rand) {
		res := resources(w)[wrng.IntN(2)]
		stateMu.Lock()
		st := states[res]
		pendingOwner, held := st.unknown, st.held
		stateMu.Unlock()
		switch {
		case pendingOwner != "":
			// Settle the operation a crash interrupted: release its owner
			// (Unlocked if the grant happened, or the release did not;
			// LockDoesNotExist if the lock is free).
			op := call(w, checker.Release, res, pendingOwner)
			if op.Outcome == checker.Indeterminate || op.Status == kahuna.MustRetry || notSent(op) {
				time.Sleep(20 * time.Millisecond)
				return
			}
			stateMu.Lock()
			st.unknown, st.held = "", nil
			stateMu.Unlock()
		case held != nil:
			time.Sleep(time.Duration(wrng.IntN(20)) * time.Millisecond) // hold it a while
			op := call(w, checker.Release, res, held.owner)
			stateMu.Lock()
			switch {
			case notSent(op): // still held: release it at the next step
			case op.Status == kahuna.Unlocked:
				st.held = nil
			case op.Outcome == checker.Indeterminate:
				st.unknown = held.owner
			default:
				fail("release of acknowledged grant %s/%s token %d: %s", res, held.owner, held.token, op)
				st.held = nil
			}
			stateMu.Unlock()
		default:
			owner := fmt.Sprintf("w%d-%d", w, n)
			op := call(w, checker.Acquire, res, owner)
			stateMu.Lock()
			switch {
			case notSent(op): // still free
			case op.Status == kahuna.Locked && op.Outcome == checker.OK:
				if op.Token <= st.maxToken {
					fail("%s: token %d after acknowledged token %d", res, op.Token, st.maxToken)
				}
				st.held, st.maxToken = &grant{owner, op.Token}, op.Token
			case op.Outcome == checker.Indeterminate:
				st.unknown = owner
			default:
				fail("acquire of a free resource %s: %s", res, op)
			}
			stateMu.Unlock()
		}
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	// gate stops the workers while a crash is examined: they hold it shared
	// for each step; the test takes it after the kill, once the steps in
	// flight have failed, and releases it once the restarted node has been
	// checked.
	var gate sync.RWMutex
	worker := func(w int) {
		defer wg.Done()
		wrng := rand.New(rand.NewPCG(seed, uint64(w)+1))
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			gate.RLock()
			step(w, n, wrng)
			gate.RUnlock()
		}
	}

	node := startNode(t, bin, "kahuna", httpPort, args...)
	node.waitReady()
	dial()
	// Locks held for the whole test: every restart must find them.
	long := map[string]grant{}
	for i := 0; i < 4; i++ {
		res, owner := fmt.Sprintf("crash/long/%d", i), fmt.Sprintf("long-%d", i)
		op := call(workers, checker.Acquire, res, owner)
		if op.Status != kahuna.Locked || op.Outcome != checker.OK {
			t.Fatalf("long-held lock %s: %s", res, op)
		}
		long[res] = grant{owner, op.Token}
		stateMu.Lock()
		states[res] = &resState{held: &grant{owner, op.Token}, maxToken: op.Token}
		stateMu.Unlock()
	}
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go worker(w)
	}
	grantsBefore := 0
	for crash := 0; crash < crashes; crash++ {
		time.Sleep(time.Duration(200+rng.IntN(1000)) * time.Millisecond)
		if code := node.signal(syscall.SIGKILL); code != -1 {
			t.Fatalf("kill -9: exit code %d", code)
		}
		gate.Lock() // the steps in flight fail; then the workers wait
		// What must have survived: every acknowledged grant not released
		// since, up to the operation the crash interrupted.
		stateMu.Lock()
		want := map[string]resState{}
		for r, st := range states {
			want[r] = *st
		}
		stateMu.Unlock()

		node = startNode(t, bin, "kahuna", httpPort, args...)
		node.waitReady()
		dial()
		for r, st := range want {
			var info kahuna.LockInfo
			var res kahuna.Result
			var err error
			for try := 0; try < 50; try++ {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				p := rec.Begin(checker.Op{Client: workers, Kind: checker.Get, Resource: r})
				info, res, err = current().Get(ctx, r, kahuna.Persistent)
				p.EndGet(res.Status, res.FencingToken, string(info.Owner), err)
				cancel()
				if err == nil && res.Status != kahuna.MustRetry {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if err != nil {
				t.Fatalf("after crash %d: get %s: %v", crash+1, r, err)
			}
			switch {
			case st.held != nil && st.unknown == "":
				if res.Status != kahuna.Got || string(info.Owner) != st.held.owner || info.FencingToken != st.held.token {
					fail("after crash %d: %s: acknowledged grant to %s with token %d lost: %v %+v", crash+1, r, st.held.owner, st.held.token, res.Status, info)
				}
				grantsBefore++
			case st.held != nil: // its release's answer was lost: held or free
				if res.Status == kahuna.Got && (string(info.Owner) != st.held.owner || info.FencingToken != st.held.token) {
					fail("after crash %d: %s: held by %s token %d, want %s token %d or free", crash+1, r, info.Owner, info.FencingToken, st.held.owner, st.held.token)
				}
			case st.unknown != "": // an acquire's answer was lost: free or granted with a new token
				if res.Status == kahuna.Got && (string(info.Owner) != st.unknown || info.FencingToken <= st.maxToken) {
					fail("after crash %d: %s: held by %s token %d, want %s with a token above %d, or free", crash+1, r, info.Owner, info.FencingToken, st.unknown, st.maxToken)
				}
			default:
				if res.Status != kahuna.LockDoesNotExist {
					fail("after crash %d: %s: released lock is %v %+v", crash+1, r, res.Status, info)
				}
			}
		}
		gate.Unlock()
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	current().Close()
	if code := node.signal(syscall.SIGTERM); code != 0 {
		t.Errorf("SIGTERM: exit code %d", code)
	}

	h := rec.History()
	opts := checker.Options{Margin: 50 * time.Millisecond, Timeout: time.Minute}
	report := checker.Check(h, opts)
	if report.Undecided() && report.Definite() == 0 {
		t.Logf("linearizability undecided on %v after %v: searching again", report.Linearizable.Undecided, report.Linearizable.Elapsed.Round(time.Millisecond))
		opts.Timeout *= 3
		report = report.Recheck(h, opts)
	}
	t.Logf("%d crashes, %d acknowledged grants checked after restarts (%d of them held since the start); history %+v, %d grants compared for fencing; linearizability %s",
		crashes, grantsBefore, crashes*len(long), report.Stats, report.FencedGrants, report.Linearizable.Result)
	if err := report.DefiniteErr(); err != nil {
		fail("checkers: %v", err)
	}
	if report.Undecided() {
		undecided = fmt.Sprintf("checkers: linearizability undecided on %v after %v: neither clean nor a finding", report.Linearizable.Undecided, report.Linearizable.Elapsed.Round(time.Millisecond))
	}
	if grantsBefore == 0 || report.FencedGrants < 20 {
		t.Errorf("weak run: %d grants checked after restarts, %d grants in all", grantsBefore, report.FencedGrants)
	}
	findingsMu.Lock()
	defer findingsMu.Unlock()
	return findings, undecided
}
