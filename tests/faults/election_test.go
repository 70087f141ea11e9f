package faults_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/checker"
	"github.com/kahunago/kahuna/internal/testknobs"
	"github.com/kahunago/kahuna/lease"
)

// The election under faults: candidates campaign, lead for a while and
// resign, over a three-node cluster whose nemesis moves, kills, crashes,
// isolates and pauses the election partition's leader, while a second
// nemesis freezes candidates (their process stops: no renewal gets out,
// nothing acts) for longer than the TTL, and cancels campaigns. Each
// leader acts in a loop, recording the instant of every act between two
// checks that its Context is live, and now and then proclaims a new value,
// some of which the network delivers late; observers record what Observe
// yields. checker.CheckElection then asks: were two candidates leader at
// one instant, did epochs rise from term to term, did every observer see a
// gap-free, duplicate-free, rising view, with each term's values in the
// order its leader proclaimed them.

const (
	electionTTL = 500 * time.Millisecond
	// electionRun is one run's length.
	electionRun = 8 * time.Second
)

// candidateLink is a candidate's connection to the cluster: its calls go
// to the node it talks to (another running one while that one is down),
// and wait while the candidate is frozen, as a stopped process's would.
type candidateLink struct {
	c    *faultCluster
	node uint64
	// late, if set, says whether to deliver a proclaim late, and after
	// how long; delivering counts the late deliveries under way.
	late       func() (time.Duration, bool)
	delivering *sync.WaitGroup
	// overtaken, if set, is told of a late proclaim that reached the node
	// after a later proclaim of its candidate had applied: the case the
	// server's compare-and-set exists for.
	overtaken func()

	mu     sync.Mutex
	thawed chan struct{} // nil, or closed when a freeze ends
}

func (l *candidateLink) freeze() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.thawed == nil {
		l.thawed = make(chan struct{})
	}
}

func (l *candidateLink) thaw() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.thawed != nil {
		close(l.thawed)
		l.thawed = nil
	}
}

// waitThawed blocks while the candidate is frozen.
func (l *candidateLink) waitThawed(ctx context.Context) error {
	l.mu.Lock()
	thawed := l.thawed
	l.mu.Unlock()
	if thawed == nil {
		return nil
	}
	select {
	case <-thawed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

var errAllDown = errors.New("every node is down")

// to waits out a freeze and picks the node to call.
func (l *candidateLink) to(ctx context.Context) (*kahuna.Node, error) {
	if err := l.waitThawed(ctx); err != nil {
		return nil, err
	}
	if n := l.c.Node(l.node); n != nil {
		return n, nil
	}
	for _, id := range l.c.Up() {
		if n := l.c.Node(id); n != nil {
			return n, nil
		}
	}
	return nil, errAllDown
}

func (l *candidateLink) TryLock(ctx context.Context, resource string, owner []byte, ttl time.Duration, d kahuna.Durability) (kahuna.Result, error) {
	n, err := l.to(ctx)
	if err != nil {
		return kahuna.Result{}, err
	}
	return n.TryLock(ctx, resource, owner, ttl, d)
}

func (l *candidateLink) Lock(ctx context.Context, resource string, owner []byte, ttl, wait time.Duration, d kahuna.Durability) (kahuna.Result, error) {
	n, err := l.to(ctx)
	if err != nil {
		return kahuna.Result{}, err
	}
	return n.Lock(ctx, resource, owner, ttl, wait, d)
}

func (l *candidateLink) Extend(ctx context.Context, resource string, owner []byte, ttl time.Duration, d kahuna.Durability) (kahuna.Result, error) {
	n, err := l.to(ctx)
	if err != nil {
		return kahuna.Result{}, err
	}
	return n.Extend(ctx, resource, owner, ttl, d)
}

func (l *candidateLink) Unlock(ctx context.Context, resource string, owner []byte, d kahuna.Durability) (kahuna.Result, error) {
	n, err := l.to(ctx)
	if err != nil {
		return kahuna.Result{}, err
	}
	return n.Unlock(ctx, resource, owner, d)
}

func (l *candidateLink) Get(ctx context.Context, resource string, d kahuna.Durability) (kahuna.LockInfo, kahuna.Result, error) {
	n, err := l.to(ctx)
	if err != nil {
		return kahuna.LockInfo{}, kahuna.Result{}, err
	}
	return n.Get(ctx, resource, d)
}

// errAnswerLost is a call whose request left but whose answer never came.
var errAnswerLost = errors.New("connection reset after the request was sent")

// Do takes a request whole on the node: a semaphore's permits, a read
// lock, a leader's proclaim (lease.Doer). A proclaim
// the link delivers late is answered errAnswerLost at once and reaches
// the node later, as one held up in the network would: a late answer is
// a real answer.
func (l *candidateLink) Do(ctx context.Context, req lease.Checked) (kahuna.LockInfo, kahuna.Result, error) {
	n, err := l.to(ctx)
	if err != nil {
		return kahuna.LockInfo{}, kahuna.Result{}, err
	}
	if req.Request().NewOwner != nil && l.late != nil {
		if delay, ok := l.late(); ok {
			l.delivering.Add(1)
			go func() {
				defer l.delivering.Done()
				time.Sleep(delay)
				dctx, cancel := context.WithTimeout(context.Background(), faultOpTimeout)
				defer cancel()
				r := req.Request()
				if info, got, err := n.Get(dctx, r.Resource, r.Durability); err == nil && got.Status == kahuna.Got && l.overtaken != nil &&
					len(info.Owner) >= lease.CandidateIDBytes && string(info.Owner[:lease.CandidateIDBytes]) == string(r.Owner[:lease.CandidateIDBytes]) &&
					string(info.Owner) != string(r.Owner) && string(info.Owner) != string(r.NewOwner) {
					l.overtaken()
				}
				_, _, _ = n.Do(dctx, req) // whatever it says, no one hears it
			}()
			return kahuna.LockInfo{}, kahuna.Result{}, errAnswerLost
		}
	}
	return n.Do(ctx, req)
}

// WatchLock watches on the node; a node that is down or closes under the
// watch ends it with MustRetry, so Observe subscribes again elsewhere.
func (l *candidateLink) WatchLock(ctx context.Context, resource string, from uint64, send func(kahuna.WatchEvent) error) error {
	n, err := l.to(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		return &kahuna.WatchError{Status: kahuna.MustRetry, Reason: err.Error()}
	}
	err = n.WatchLock(ctx, resource, from, send)
	var we *kahuna.WatchError
	if err != nil && ctx.Err() == nil && !errors.As(err, &we) {
		return &kahuna.WatchError{Status: kahuna.MustRetry, Reason: err.Error()}
	}
	return err
}

// countReigns counts, from now until c.reignSink is cleared, the reigns
// of every partition as they begin (the serve hook).
func (c *faultCluster) countReigns() faultEffects {
	eff := faultEffects{reigns: &reignCount{of: make([]atomic.Int64, c.partitions)}}
	sink := func(_ uint64, q int, _ uint64, serve func()) {
		serve()
		eff.reigns.of[q].Add(1)
		eff.reigns.mu.Lock()
		eff.reigns.starts = append(eff.reigns.starts, reignStart{partition: q, at: time.Now()})
		eff.reigns.mu.Unlock()
	}
	c.reignSink.Store(&sink)
	return eff
}

// freezer freezes one of links at a time, as a process pause would, until
// ctx ends, and returns how many freezes it made: every 0.3 s to 1 s, for
// ttl and up to ttl more, one picked at random, though each link that busy
// says is busy (a leader, a holder) takes the pick but one time in odds.
// When no link is busy it waits up to a second for one to be: a freeze of
// a process that holds nothing tests little, and under load (a leader
// fault, a slow machine) links spend much of a run waiting for a grant.
// around, if not nil, is called as link i's freeze begins and returns
// what to call when it ends.
func freezer(ctx context.Context, seed uint64, links []*candidateLink, ttl time.Duration, odds int, busy func(int) bool, around func(i int) func()) int {
	rng := rand.New(rand.NewPCG(seed, 0xf7ee2e)) // the nemesis has its own
	anyBusy := func() bool {
		for j := range links {
			if busy(j) {
				return true
			}
		}
		return false
	}
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return n
		case <-time.After(time.Duration(300+rng.IntN(700)) * time.Millisecond):
		}
		for wait := time.Now().Add(time.Second); !anyBusy() && time.Now().Before(wait); {
			select {
			case <-ctx.Done():
				return n
			case <-time.After(5 * time.Millisecond):
			}
		}
		i := rng.IntN(len(links))
		for j := range links {
			if busy(j) && rng.IntN(odds) > 0 {
				i = j
			}
		}
		done := func() {}
		if around != nil {
			done = around(i)
		}
		links[i].freeze()
		time.Sleep(ttl + time.Duration(rng.IntN(int(ttl))))
		links[i].thaw()
		done()
	}
}

// electionOpts is what an election run varies besides its seed.
type electionOpts struct {
	dur  kahuna.Durability
	mod  func(kahuna.Config) kahuna.Config // nil: the engine as it is
	opts []kahuna.AcquireOption            // added to every campaign (the controls' knobs)
}

// electionRunResult is what one run saw.
type electionRunResult struct {
	terms      []checker.Term
	observed   [][]checker.Observed
	violations []checker.Violation
	faults     map[faultKind]int
	freezes    int
	reigns     int // reigns of the election's partition begun in the run
	effects    faultEffects
	campaigns  struct{ won, failed, cancelled, sessionLost int }
	proclaims  struct{ asked, confirmed, late, overtaken int }
	frozen     []sharedFreeze  // the freezes of a leader (holder: its candidate)
	began      []time.Duration // when each reign of the election's partition began
}

func (r electionRunResult) String() string {
	acts := 0
	for _, t := range r.terms {
		acts += t.Acts
	}
	events := 0
	for _, o := range r.observed {
		events += len(o)
	}
	return fmt.Sprintf("%d terms (%d acts), campaigns won %d, failed %d, cancelled %d, ended by a lost session %d; proclaims %d (%d confirmed, %d requests delivered late, %d after a later one); %d observed events; faults %s (%s), %d freezes, %d reigns of the partition begun",
		len(r.terms), acts, r.campaigns.won, r.campaigns.failed, r.campaigns.cancelled, r.campaigns.sessionLost,
		r.proclaims.asked, r.proclaims.confirmed, r.proclaims.late, r.proclaims.overtaken, events, fmtCounts(r.faults), r.effects, r.freezes, r.reigns)
}

var electionFaults = []faultKind{fTransfer, fKillLeader, fCrashLeader, fIsolateLeader, fPause}

func runElection(t *testing.T, seed uint64, o electionOpts) electionRunResult {
	t.Helper()
	c := startFaultCluster(t, seed, 2, o.mod)
	rng := rand.New(rand.NewPCG(seed, 0xe1ec7))
	name := fmt.Sprintf("jobs-%d", seed)
	p := c.Node(c.Up()[0]).Partition(kahuna.ElectionPrefix + name)
	rec := checker.NewRecorder()
	start := time.Now()

	// The reigns of the election's partition, counted as they begin: the
	// faults must have moved its leadership.
	eff := c.countReigns()
	defer c.reignSink.Store(nil)

	ctx, cancel := context.WithTimeout(context.Background(), electionRun)
	defer cancel()
	var res electionRunResult
	var mu sync.Mutex // res
	links := make([]*candidateLink, 4)
	var leading [4]atomic.Bool
	var wg, delivering sync.WaitGroup
	// One proclaim in three is delivered late, 50 to 600 ms after it was
	// sent (and its sender told the answer was lost).
	lrng := rand.New(rand.NewPCG(seed, 0x1a7e))
	late := func() (time.Duration, bool) {
		mu.Lock()
		defer mu.Unlock()
		if lrng.IntN(3) > 0 {
			return 0, false
		}
		res.proclaims.late++
		return time.Duration(50+lrng.IntN(550)) * time.Millisecond, true
	}
	overtaken := func() {
		mu.Lock()
		defer mu.Unlock()
		res.proclaims.overtaken++
	}
	for i := range links {
		links[i] = &candidateLink{c: c, node: c.IDs()[i%len(c.IDs())], late: late, delivering: &delivering, overtaken: overtaken}
		crng := rand.New(rand.NewPCG(seed, uint64(i)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			link := links[i]
			opts := append([]kahuna.AcquireOption{kahuna.WithTTL(electionTTL), kahuna.WithDurability(o.dur)}, o.opts...)
			// Odd candidates campaign in a session (a new one once it is
			// lost): a freeze then loses the session, which must end the
			// leadership or abort the campaign.
			var session *kahuna.Session
			defer func() {
				if session != nil {
					cctx, cancel := context.WithTimeout(context.Background(), faultOpTimeout)
					_ = session.Close(cctx)
					cancel()
				}
			}()
			for round := 0; ctx.Err() == nil; round++ {
				value := fmt.Sprintf("c%d-%d", i, round)
				campaignOpts := opts
				if i%2 == 1 {
					if session == nil || session.Context().Err() != nil {
						s, err := kahuna.NewSession(ctx, link, opts...)
						if err != nil {
							time.Sleep(10 * time.Millisecond) // the cluster or the link is down: try again
							continue
						}
						session = s
					}
					campaignOpts = append(opts, kahuna.WithSession(session))
				}
				cctx, ccancel := ctx, context.CancelFunc(func() {})
				cancelled := crng.IntN(6) == 0 // a campaign given up while it waits
				if cancelled {
					cctx, ccancel = context.WithTimeout(ctx, time.Duration(20+crng.IntN(400))*time.Millisecond)
				}
				ld, err := kahuna.Campaign(cctx, link, name, []byte(value), campaignOpts...)
				ccancel()
				if err != nil {
					mu.Lock()
					switch {
					case errors.Is(err, kahuna.ErrSessionLost):
						res.campaigns.sessionLost++
					case cancelled && cctx.Err() != nil:
						res.campaigns.cancelled++
					case ctx.Err() == nil:
						res.campaigns.failed++
						t.Logf("candidate %d campaign: %v", i, err)
					}
					mu.Unlock()
					continue
				}
				term := checker.Term{Candidate: i, Value: value, Epoch: ld.Epoch()}
				leading[i].Store(true)
				// The term's work: a number of acts (about 50 ms to 1.5 s of
				// them), so a freeze does not use it up.
				tenure := 50 + crng.IntN(1500)
				lctx := ld.Context()
				for term.Acts < tenure {
					_ = link.waitThawed(context.Background()) // a frozen process acts no more
					if lctx.Err() != nil {
						break
					}
					at := rec.Now()
					if lctx.Err() != nil {
						break
					}
					if term.Acts == 0 {
						term.FirstAct = at
					}
					term.LastAct = at
					term.Acts++
					if crng.IntN(60) == 0 { // about every 60 ms of leading
						v := fmt.Sprintf("%s.%d", value, len(term.Proclaimed)+1)
						term.Proclaimed = append(term.Proclaimed, v) // asked: it may apply whatever the answer
						pctx, pcancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
						err := ld.Proclaim(pctx, []byte(v))
						pcancel()
						mu.Lock()
						res.proclaims.asked++
						if err == nil {
							res.proclaims.confirmed++
						}
						mu.Unlock()
					}
					time.Sleep(time.Millisecond)
				}
				leading[i].Store(false)
				rctx, rcancel := context.WithTimeout(context.Background(), faultOpTimeout)
				_ = ld.Resign(rctx) // lost or not, resigning is safe
				rcancel()
				mu.Lock()
				res.terms = append(res.terms, term)
				res.campaigns.won++
				mu.Unlock()
			}
		}()
	}

	observers := make([][]checker.Observed, 2)
	for i := range observers {
		link := &candidateLink{c: c, node: c.IDs()[(i+1)%len(c.IDs())]}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ev, err := range kahuna.Observe(ctx, link, name) {
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("observer %d: %v", i, err)
					}
					return
				}
				observers[i] = append(observers[i], checker.Observed{Elected: ev.Kind != kahuna.Vacant, Proclaimed: ev.Kind == kahuna.Proclaimed,
					Value: string(ev.Value), Epoch: ev.Epoch})
			}
		}()
	}

	// The freezer: mostly the leader, for longer than the TTL.
	wg.Add(1)
	go func() {
		defer wg.Done()
		n := freezer(ctx, seed, links, electionTTL, 4, func(j int) bool { return leading[j].Load() }, func(i int) func() {
			f := sharedFreeze{holder: i, from: rec.Now()}
			if !leading[i].Load() {
				return func() {}
			}
			return func() {
				f.to = rec.Now()
				mu.Lock()
				res.frozen = append(res.frozen, f)
				mu.Unlock()
			}
		})
		mu.Lock()
		res.freezes = n
		mu.Unlock()
	}()

	counts := map[faultKind]int{}
	nemesis(ctx, t, c, rng, runOpts{kinds: electionFaults, pauseMax: 1500 * time.Millisecond}, []int{p}, counts, &eff, start, nil)
	wg.Wait()
	delivering.Wait()
	eff.settle()
	res.faults, res.effects = counts, eff
	res.observed = observers
	res.reigns = int(eff.reigns.of[p].Load())
	eff.reigns.mu.Lock()
	for _, b := range eff.reigns.starts {
		if b.partition == p {
			res.began = append(res.began, rec.At(b.at))
		}
	}
	eff.reigns.mu.Unlock()
	res.violations = checker.CheckElection(res.terms, res.observed)
	return res
}

// leaderActedAcrossAFreeze reports whether a leader acted both before and
// after a freeze during which another candidate's term acted.
func leaderActedAcrossAFreeze(r electionRunResult) bool {
	for _, f := range r.frozen {
		across := slices.ContainsFunc(r.terms, func(t checker.Term) bool {
			return t.Candidate == f.holder && t.Acts > 0 && t.FirstAct < f.from && t.LastAct > f.to
		})
		during := slices.ContainsFunc(r.terms, func(t checker.Term) bool {
			return t.Candidate != f.holder && t.Acts > 0 && t.FirstAct < f.to && t.LastAct > f.from
		})
		if across && during {
			return true
		}
	}
	return false
}

// electedAcrossAReign reports whether a term acted before a reign of the
// election's partition began, and another's first act came after it.
func electedAcrossAReign(r electionRunResult) bool {
	for _, b := range r.began {
		before := slices.ContainsFunc(r.terms, func(t checker.Term) bool { return t.Acts > 0 && t.FirstAct < b })
		after := slices.ContainsFunc(r.terms, func(t checker.Term) bool { return t.Acts > 0 && t.FirstAct > b })
		if before && after {
			return true
		}
	}
	return false
}

// requireElectionTested fails a run that did not test what it is for
// (electionUntested).
func requireElectionTested(t *testing.T, seed uint64, r electionRunResult) {
	t.Helper()
	if short := electionUntested(r); len(short) > 0 {
		t.Errorf("seed %d tested too little (%s): %s", seed, strings.Join(short, "; "), r)
	}
}

// electionUntested says what a run did not test of what it is for:
// elections with acts, several terms of the partition's Raft leadership,
// freezes, and observers that saw terms.
func electionUntested(r electionRunResult) []string {
	acted, inSession := 0, 0
	for _, term := range r.terms {
		if term.Acts > 0 {
			acted++
			inSession += term.Candidate % 2
		}
	}
	movedNone := r.faults[fTransfer] > 0 && r.effects.transfersMoved == 0
	var short []string
	for _, c := range []struct {
		failed bool
		why    string
	}{
		{acted < 5, fmt.Sprintf("%d terms acted (want 5)", acted)},
		{inSession == 0, "no term in a session acted"},
		{r.reigns < 1, "no reign of the partition began"},
		{movedNone, "no transfer moved the partition"},
		{r.freezes == 0, "no candidate was frozen"},
		{len(r.observed[0]) < 3, fmt.Sprintf("the first observer saw %d events (want 3)", len(r.observed[0]))},
	} {
		if c.failed {
			short = append(short, c.why)
		}
	}
	return short
}

// electionSeeds is the seeds a test runs: def, or 1..N with
// KAHUNA_ELECTION_SEEDS=N (the catch rates of the controls, a long clean run).
func electionSeeds(t *testing.T, def ...uint64) []uint64 {
	v := os.Getenv("KAHUNA_ELECTION_SEEDS")
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("KAHUNA_ELECTION_SEEDS=%q: want a count of seeds", v)
	}
	var seeds []uint64
	for s := 1; s <= n; s++ {
		seeds = append(seeds, uint64(s))
	}
	return seeds
}

// TestFaultsElection: the election keeps one leader at a time, rising
// epochs and consistent observers under faults, for both durabilities.
func TestFaultsElection(t *testing.T) {
	t.Parallel()
	for _, seed := range electionSeeds(t, 1, 2) {
		d := kahuna.Persistent
		if seed%2 == 0 {
			d = kahuna.Ephemeral
		}
		t.Run(fmt.Sprintf("seed-%d-%s", seed, d), func(t *testing.T) {
			// A clean run that tested too little (on a loaded machine, a
			// transfer whose target lagged moved nothing) proves less, not
			// something wrong: it is run again with the next seed of the
			// same durability (+1000), at most three runs in all.
			for try := 1; ; try++ {
				r := runElection(t, seed, electionOpts{dur: d})
				t.Logf("seed %d %s: %s", seed, d, r)
				for _, v := range r.violations {
					t.Errorf("seed %d: %v", seed, v)
				}
				short := electionUntested(r)
				if len(r.violations) > 0 || len(short) == 0 || try == 3 {
					requireElectionTested(t, seed, r)
					return
				}
				t.Logf("seed %d: clean, but tested too little (%s); again with seed %d", seed, strings.Join(short, "; "), seed+1000)
				seed += 1000
			}
		})
	}
}

// TestFaultsElectionControls: each protection of the election, switched
// off, is caught by the finding it exists for.
func TestFaultsElectionControls(t *testing.T) {
	t.Parallel()
	for _, ctl := range []struct {
		name  string
		o     electionOpts
		want  string                       // the violation kind that must be found
		arose func(electionRunResult) bool // whether the run could have found it
	}{
		// The leader keeps acting until an answer says its lease is gone
		// (etcd's Campaign with a lost session): a frozen leader, thawed,
		// acts while its successor leads.
		// A run where no leader acted both before and after a freeze while
		// another led could not catch it (a freeze may begin after a
		// term's last act, or an answer in flight may end its Context
		// during it); a leadership that keeps its deadline never does.
		{"leadership-ignores-deadline", electionOpts{dur: kahuna.Persistent, opts: []kahuna.AcquireOption{testknobs.WithoutDeadline()}}, "two-leaders", leaderActedAcrossAFreeze},
		// Ephemeral tokens restart from the stored ones at each reign: a
		// new partition leader elects epoch 0 again.
		// A run where no leader acted before a reign began and another
		// after it could not catch it.
		{"ephemeral-epochs-from-zero", electionOpts{dur: kahuna.Ephemeral, mod: testknobs.WithEphemeralTokensFromZero}, "epoch-not-increasing", electedAcrossAReign},
		// A proclaim is taken from any value of the holder's candidate ID,
		// not only from the holder: one delivered late undoes a later one.
		// A run where no late proclaim came after a later one could not
		// catch it.
		{"proclaim-without-compare", electionOpts{dur: kahuna.Persistent, mod: testknobs.WithProclaimAnyValue}, "observe-value-went-back",
			func(r electionRunResult) bool { return r.proclaims.overtaken > 0 }},
	} {
		for _, seed := range electionSeeds(t, 3) {
			t.Run(fmt.Sprintf("%s-seed-%d", ctl.name, seed), func(t *testing.T) {
				for try := 1; ; try++ {
					r := runElection(t, seed, ctl.o)
					kinds := map[string]int{}
					for _, v := range r.violations {
						kinds[v.Kind]++
					}
					t.Logf("control %s, seed %d: %s; violations %v", ctl.name, seed, r, kinds)
					switch {
					case kinds[ctl.want] > 0:
						return
					case ctl.arose(r):
						t.Errorf("control %s: no %s violation (found %v): the suite would miss this bug", ctl.name, ctl.want, kinds)
						return
					case try == 3:
						t.Errorf("control %s untested in %d runs: its scenario never arose", ctl.name, try)
						return
					}
					t.Logf("seed %d: not caught, and its scenario did not arise; again with seed %d", seed, seed+1000)
					seed += 1000
				}
			})
		}
	}
}
