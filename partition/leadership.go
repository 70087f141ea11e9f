package partition

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kahunago/kahuna/durability"
)

// Prover is what Leadership needs from the Raft backend (durability.Raft).
type Prover interface {
	// Fence starts this node's epoch over p in term: after it returns nil,
	// only records decided in that epoch change p's state, and everything
	// committed before it is applied locally.
	Fence(ctx context.Context, p int, term uint64) error
	// Confirm proves this node led p in term at some moment after the call
	// started.
	Confirm(ctx context.Context, p int, term uint64) error
	// TokenReach, read after Fence, is above every ephemeral token an
	// earlier leader of p granted; RaiseReach raises it, fenced by this
	// node's epoch of term (tokens.go).
	TokenReach(p int) (int64, error)
	RaiseReach(ctx context.Context, p int, term uint64, reach int64) error
	// EphemeralGrace, read after Fence, is how long after the last earlier
	// leader of p stopped serving an ephemeral lease it granted may run;
	// RaiseEphemeralTTL raises the bound on this reign's ephemeral TTLs
	// (and clears what earlier reigns carried), fenced like RaiseReach.
	EphemeralGrace(p int) (time.Duration, error)
	RaiseEphemeralTTL(ctx context.Context, p int, term uint64, ttl time.Duration) error
	// HandedOver, read after Fence, is the live ephemeral leases the
	// previous leader of p handed over to this node's epoch, if it did.
	HandedOver(p int) ([]durability.HandedLease, error)
}

// Purger is the lock actors' cache of a partition: a new leader forgets
// what it held, then installs the leases handed over to it.
type Purger interface {
	DropPartition(ctx context.Context, p int) error
	Install(ctx context.Context, p int, leases []durability.HandedLease) error
}

// Options tune a Leadership.
type Options struct {
	// Lease is how long after the start of a successful Fence or Confirm this
	// node may answer from its cache (see LeaseFor). 0 means leadership
	// needs no lease: the node is the only voter, so no one else can be
	// elected while it lives.
	Lease time.Duration
	// RenewEvery is how often a served partition's lease is renewed
	// (default Lease/4).
	RenewEvery time.Duration
	// TransferGrace is how long after a leader transfer was requested the
	// lease stays dropped in that term (default 1 s).
	TransferGrace time.Duration
	// TakeoverWait is how long a new leader waits, from the start of its
	// takeover, before it serves (see TakeoverWaitFor): any lease an earlier
	// leader holds has run out by then, however this node was elected. 0
	// means no wait (a single voter, or a negative control).
	TakeoverWait time.Duration
	// EphemeralFencingOnly skips the ephemeral grace: a new leader serves
	// after TakeoverWait even if an earlier leader's ephemeral leases may
	// still run (they are lost at a leader change; their holders must rely
	// on fencing tokens, which still rise). Otherwise it waits them out,
	// and ephemeral TTLs are bounded per reign (tokens.go).
	EphemeralFencingOnly bool
	// UnsafeNoLease answers on the Raft leader flag alone, as a deposed
	// leader that has not heard the news would: a negative control for the
	// fault tests, never for production.
	UnsafeNoLease bool
	// UnsafeMonotonicOnly ends leases on the monotonic clock alone, which
	// does not count a suspend of the machine: a negative control for the
	// tests, never for production.
	UnsafeMonotonicOnly bool
	// OnServe, a test hook, starts each reign: called with p, the term and
	// serve, which begins serving, it must call serve once. The fault tests
	// record the instants around serve, so their history knows exactly
	// when every reign began (sampling misses short reigns under load).
	OnServe func(p int, term uint64, serve func())
	Logger  *slog.Logger
}

// LeaseFor is the leader lease for Raft tick rtt and an election timeout of
// electionTicks ticks, with CheckQuorum on every voter:
//
//	(electionTicks − 2) · rtt · (1 − ρ) − margin,  ρ = 1%, margin = one tick
//
// Why it holds (docs/design.md): Confirm takes t0, then a read index
// completes while this node leads term T before and after. The heartbeats
// that confirmed it left this node after t0, in term T; every voter that
// acked reset its election timer on receipt and, with CheckQuorum, drops
// higher-term (pre)votes for electionTicks of its own ticks. A rival needs
// a quorum of votes, which includes an acker, so it cannot be elected
// before t0 + electionTicks ticks by that acker's clock. Two ticks are
// lost to the ticker buffering one fire; ρ covers tick-rate differences
// between hosts (NTP slews at most 0.05%); the margin covers scheduling
// between the clock read and the answer. A node leads a term at most once,
// so a read index forwarded by a follower (which would succeed) cannot
// pass the check after it.
//
// The lease is measured on this node's clocks, so it must not run slower
// than real time. It ends when either of two clocks passes t0 + lease:
// Go's monotonic clock (CLOCK_MONOTONIC), which no one can step and which
// runs while the process is stopped (SIGSTOP, GC), but not while the
// machine is suspended; and the wall clock (CLOCK_REALTIME), to which the
// kernel adds the time slept on resume, before any process runs again (as
// it does to CLOCK_BOOTTIME, which Go reads only by a system call, too
// slow for every decision). A wall clock stepped back changes nothing
// (the monotonic one still bounds the lease); stepped forward, it ends
// leases early, until the next renewal. Not covered, by any clock inside
// the machine: a virtual machine frozen by its hypervisor (paused, or in
// the blackout of a live migration), whose clocks stop with it, so it
// wakes up serving for what is left of its lease while its peers may have
// moved on (see docs/raft-timing.md).
//
// Not covered by the lease either: a leader transfer, whose TimeoutNow
// lets the target campaign past the voters' stickiness: Relinquish drops
// the lease first; and a membership change, which changes what a quorum
// is: Suspend drops the lease before the change is proposed and keeps it
// dropped (no renewal) until Resume, once it is applied; the next renewal
// then starts after the apply, so its quorum is counted in the new
// configuration (internal/node's member.go has the argument). With rtt 10 ms
// and 10 election ticks the lease is about 69 ms.
//
// A leader transfer is covered on the target's side too (TakeoverWait),
// since Raft does not always hand over from the leader that dropped its
// lease: a transfer asked of a replica deposed a moment before is
// forwarded to the new leader, whose lease is live; and a TimeoutNow held
// up (its target paused) can elect the target after the old leader's
// grace ran out and it renewed its lease.
func LeaseFor(rtt time.Duration, electionTicks int) time.Duration {
	d := time.Duration(float64(time.Duration(electionTicks-2)*rtt)*(1-leaseDrift)) - rtt
	return max(d, 0)
}

// leaseDrift (ρ) bounds how much faster one host's clock may run than
// another's over a lease.
const leaseDrift = 0.01

// TakeoverWaitFor is how long a new leader waits before it serves, for the
// lease of LeaseFor(rtt, electionTicks): a full election timeout, stretched
// by ρ.
//
// Why it is enough, whoever handed over and however late: an earlier
// leader's lease runs from a t0 before a read index that a quorum of its
// term acked; this node's election needed a quorum of votes, so one voter
// both acked that read index and voted here, and acked first (once it
// voted in the later term it answers the earlier term's heartbeats with a
// rejection). So t0 < the ack < the vote < this node learning that it
// leads < the start of its takeover, and the lease, LeaseFor long by the
// old leader's clock, has run out TakeoverWaitFor after that start by this
// node's. An election that did not bypass the voters' stickiness already
// took that long; a transfer did not, and pays the wait.
//
// The argument holds only if the old leader and this node compute the
// lease and the wait from one rtt and electionTicks, and the voter's ack
// and vote happen under that timing: kahuna members refuse Raft
// connections with a member of another timing, and a member restarted
// under another timing waits out its old leases before Raft starts
// (internal/node's timing.go).
func TakeoverWaitFor(rtt time.Duration, electionTicks int) time.Duration {
	return time.Duration(float64(time.Duration(electionTicks)*rtt) * (1 + leaseDrift))
}

// reign is this node's serving state of one partition: the term it fenced
// and the end of its lease.
type reign struct {
	term       uint64
	until      instant // the zero instant: no lease
	renewAfter int64   // no renewal before this, on the monotonic clock (a transfer was requested)
	relinquish bool    // a transfer was requested in this term
	changing   bool    // a membership change is pending (Suspend): no lease, no renewal
	waiting    bool    // fenced, not serving before the takeover wait ends (begin)
}

// Leadership tracks which partitions this node serves. It is fed Raft
// leader events and turns "I became leader of term T" into "I serve" only
// after fencing the epoch (durability.Raft.Fence: every entry committed
// before is applied, and no earlier leader's late record can apply after)
// and purging the actors' cached entries of the partition (they may be
// stale). Serving then also needs a live leader lease, renewed in the
// background; losing leadership, the lease, or the term stops serving at
// once.
type Leadership struct {
	parts   []atomic.Pointer[reign]       // nil: not serving
	windows []atomic.Pointer[tokenWindow] // the latest reign's ephemeral tokens (tokens.go)
	reacher Prover                        // set by Start
	life    context.Context               // ends with Close
	opts    Options
	logger  *slog.Logger
	base    time.Time      // origin of the monotonic clock of leases
	clock   func() instant // replaces now in tests; nil: the machine's clocks

	mu      sync.Mutex
	latest  []durability.LeaderEvent // newest event per partition
	dirty   []bool                   // events not yet acted upon
	changed chan struct{}            // closed and replaced on every event and serving change
	kick    chan struct{}

	cancel context.CancelFunc
	done   chan struct{}

	// Test hook (node.Node.Pause): while frozen, events are held in held
	// instead of being acted upon.
	frozen bool
	held   []durability.LeaderEvent
}

// NewLeadership tracks n partitions. Events observed before Start are kept
// and acted upon once it runs.
func NewLeadership(n int, opts Options) *Leadership {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.RenewEvery <= 0 {
		opts.RenewEvery = opts.Lease / 4
	}
	if opts.TransferGrace <= 0 {
		opts.TransferGrace = time.Second
	}
	return &Leadership{
		parts:   make([]atomic.Pointer[reign], n),
		windows: make([]atomic.Pointer[tokenWindow], n),
		life:    context.Background(),
		opts:    opts,
		logger:  opts.Logger,
		base:    time.Now(),
		latest:  make([]durability.LeaderEvent, n),
		dirty:   make([]bool, n),
		changed: make(chan struct{}),
		kick:    make(chan struct{}, 1),
		done:    make(chan struct{}),
	}
}

// instant is a reading of the lease clocks (see LeaseFor): monotonic
// nanoseconds since NewLeadership, and wall-clock unix nanoseconds.
type instant struct{ mono, wall int64 }

// add returns i moved d later on both clocks.
func (i instant) add(d time.Duration) instant {
	return instant{mono: i.mono + int64(d), wall: i.wall + int64(d)}
}

// later returns, clock by clock, the later of i and j.
func (i instant) later(j instant) instant {
	return instant{mono: max(i.mono, j.mono), wall: max(i.wall, j.wall)}
}

// now reads the lease clocks: both come from one time.Now, which reads
// them without a system call.
func (l *Leadership) now() instant {
	if l.clock != nil {
		return l.clock()
	}
	t := time.Now()
	return instant{mono: int64(t.Sub(l.base)), wall: t.UnixNano()}
}

// mono is the monotonic clock alone, for what only paces this node.
func (l *Leadership) mono() int64 { return l.now().mono }

// live reports whether a lease that ends at until still runs at now: on
// both clocks (see LeaseFor).
func (l *Leadership) live(until, now instant) bool {
	return now.mono < until.mono && (l.opts.UnsafeMonotonicOnly || now.wall < until.wall)
}

// Serving reports whether this node may answer for partition p now, and
// the term of the epoch it serves (records decided now carry it). It is
// called for every decision, so a deposed or paused leader stops at once.
func (l *Leadership) Serving(p int) (term uint64, ok bool) {
	r := l.parts[p].Load()
	if r == nil || r.waiting {
		return 0, false
	}
	if l.opts.Lease > 0 && !l.opts.UnsafeNoLease && !l.live(r.until, l.now()) {
		return 0, false
	}
	return r.term, true
}

// LeaderOf returns the last known leader of p (0 if none) and whether it is
// this node.
func (l *Leadership) LeaderOf(p int) (leaderID uint64, self bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ev := l.latest[p]
	return ev.LeaderID, ev.IsSelf
}

// Observe records a leader event. It never blocks, so it may be called from
// Raft's event goroutine.
func (l *Leadership) Observe(ev durability.LeaderEvent) {
	if ev.Partition < 0 || ev.Partition >= len(l.parts) {
		return
	}
	l.mu.Lock()
	if l.frozen {
		l.held = append(l.held, ev)
		l.mu.Unlock()
		return
	}
	prev := l.latest[ev.Partition]
	l.latest[ev.Partition] = ev
	l.dirty[ev.Partition] = true
	if !ev.IsSelf || prev.Term != ev.Term {
		if l.stopServing(ev.Partition) {
			l.logger.Info("stopped serving partition", "partition", ev.Partition, "term", ev.Term, "leader", ev.LeaderID)
		}
	}
	l.notify()
	l.mu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// Relinquish drops the lease of p before this node asks Raft to hand p to
// another node, so it stops answering while the hand-over is under way.
// Renewal stays off for TransferGrace (a transfer that did not happen by
// then is taken as abandoned). Safety does not rest on it: the target
// waits out any lease of this term before it serves (TakeoverWait), even
// one renewed after the grace. It returns the term of p's reign here, and
// whether this node had one (fenced, serving or not).
func (l *Leadership) Relinquish(p int) (term uint64, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.parts[p].Load()
	if r == nil {
		return 0, false
	}
	l.parts[p].Store(&reign{term: r.term, renewAfter: l.mono() + int64(l.opts.TransferGrace), relinquish: true, changing: r.changing, waiting: r.waiting})
	l.notify()
	return r.term, true
}

// Retire stops serving p for good (the node is closing) and returns the
// term it served, and whether it served p.
func (l *Leadership) Retire(p int) (term uint64, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.parts[p].Load()
	if r == nil || r.waiting {
		return 0, false
	}
	l.stopServing(p)
	return r.term, true
}

// RelinquishSteady is Relinquish for a move nobody asked for (leader
// balancing): it drops the lease only if this node serves p now, with a
// live lease, and no membership change of p is pending (Suspend without
// Resume) or another transfer was just requested. Checked and done under
// the same lock as Suspend, so a change and a balancing move of p never
// overlap. It returns the term it served, and whether it relinquished.
func (l *Leadership) RelinquishSteady(p int) (term uint64, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.parts[p].Load()
	now := l.now()
	if r == nil || r.waiting || r.changing || r.relinquish || (l.opts.Lease > 0 && !l.live(r.until, now)) {
		return 0, false
	}
	l.parts[p].Store(&reign{term: r.term, renewAfter: now.mono + int64(l.opts.TransferGrace), relinquish: true})
	l.notify()
	return r.term, true
}

// RelinquishAgain drops the lease of p again before a move asked in term
// is asked of Raft once more (Raft may drop a transfer): only while this
// node still reigns over p in term and no membership change of p is
// pending. Checked and done under the same lock as Suspend, so a move
// asked again and a change never overlap, whatever the first request's
// grace allowed since. It reports whether it relinquished.
func (l *Leadership) RelinquishAgain(p int, term uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.parts[p].Load()
	if r == nil || r.term != term || r.changing {
		return false
	}
	l.parts[p].Store(&reign{term: r.term, renewAfter: l.mono() + int64(l.opts.TransferGrace), relinquish: true, waiting: r.waiting})
	l.notify()
	return true
}

// Suspend drops the lease of p, which this node must serve in a fenced
// term, before it proposes a membership change of p, and keeps it dropped
// (Serving false, no renewal, no new lease from a takeover in the same
// term) until Resume. It returns the term, and false if this node does not
// serve p (not its leader, or not fenced yet) or asked Raft to hand p over
// less than TransferGrace ago (the caller retries: the partition is moving,
// and its next leader proposes the change). See LeaseFor.
func (l *Leadership) Suspend(p int) (term uint64, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.parts[p].Load()
	if r == nil || r.changing || r.relinquish && l.mono() < r.renewAfter {
		return 0, false
	}
	l.parts[p].Store(&reign{term: r.term, renewAfter: r.renewAfter, relinquish: r.relinquish, changing: true, waiting: r.waiting})
	l.notify()
	if l.opts.Lease == 0 {
		l.logger.Warn("membership change on a node without a leader lease", "partition", p)
	}
	return r.term, true
}

// Resume ends the Suspend of p in term once the change is applied here
// (or known never to apply). The lease stays expired until the next
// renewal, whose confirmation starts after this call.
func (l *Leadership) Resume(p int, term uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.parts[p].Load()
	if r == nil || r.term != term || !r.changing {
		return
	}
	l.parts[p].Store(&reign{term: r.term, renewAfter: r.renewAfter, relinquish: r.relinquish, waiting: r.waiting})
	l.notify()
}

// Freeze holds every later event back until Thaw, as a paused process
// would not see them: a test hook for process-pause faults.
func (l *Leadership) Freeze() {
	l.mu.Lock()
	l.frozen = true
	l.mu.Unlock()
}

// Thaw delivers the events held since Freeze, in order.
func (l *Leadership) Thaw() {
	l.mu.Lock()
	held := l.held
	l.frozen, l.held = false, nil
	l.mu.Unlock()
	for _, ev := range held {
		l.Observe(ev)
	}
}

// stopServing must be called with mu held. It reports whether p was served.
func (l *Leadership) stopServing(p int) bool {
	if l.parts[p].Swap(nil) != nil {
		l.notify()
		return true
	}
	return false
}

// notify wakes WaitReady; it must be called with mu held.
func (l *Leadership) notify() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// Start acts on leader events until Close: fence and purge on gaining
// leadership, purge on losing it, and renew the leases of served
// partitions.
func (l *Leadership) Start(prover Prover, purge Purger) {
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	l.reacher, l.life = prover, ctx
	var wg sync.WaitGroup
	if l.opts.Lease > 0 {
		for p := range l.parts {
			wg.Add(1)
			go func() { defer wg.Done(); l.renew(ctx, prover, p) }()
		}
	}
	wg.Add(1)
	go func() { defer wg.Done(); l.run(ctx, prover, purge) }()
	go func() { wg.Wait(); close(l.done) }()
}

func (l *Leadership) run(ctx context.Context, prover Prover, purge Purger) {
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	failing := make([]time.Time, len(l.parts)) // since when p's takeover fails (zero: it does not)
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.kick:
		case <-retry.C:
		}
		again := false
		for p := range l.parts {
			l.mu.Lock()
			ev, dirty := l.latest[p], l.dirty[p]
			l.dirty[p] = false
			l.mu.Unlock()
			if !dirty {
				continue
			}
			if err := l.takeOver(ctx, ev, prover, purge); err != nil {
				if ctx.Err() != nil {
					return
				}
				l.logRetry(failing, p, ev, err)
				l.mu.Lock()
				if l.latest[p] == ev {
					l.dirty[p] = true
					again = true
				}
				l.mu.Unlock()
			} else {
				failing[p] = time.Time{}
			}
		}
		if again {
			retry.Reset(50 * time.Millisecond)
		}
	}
}

// slowTakeOver is how long a partition's takeover may keep failing before
// it is worth a warning: during elections a fence fails routinely (the
// term moved on) and is retried every 50 ms.
const slowTakeOver = 5 * time.Second

// logRetry logs a failed takeover of p: at debug while it is young, once
// at warn when it has failed for slowTakeOver.
func (l *Leadership) logRetry(failing []time.Time, p int, ev durability.LeaderEvent, err error) {
	now := time.Now()
	if failing[p].IsZero() {
		failing[p] = now
	}
	level := slog.LevelDebug
	if since := now.Sub(failing[p]); since >= slowTakeOver {
		level = slog.LevelWarn
		failing[p] = now // warn again after another slowTakeOver
	}
	l.logger.Log(context.Background(), level, "partition not served yet, retrying", "partition", p, "term", ev.Term, "err", err)
}

// fenceTimeout bounds one fence attempt; a failed one is retried while
// this node is still the leader.
const fenceTimeout = 5 * time.Second

// takeOver applies one event. For a loss it purges; for a gain it fences
// the epoch and purges, then serves if nothing changed meanwhile, with a
// lease from before the fence (its commit was a quorum's answer in term).
func (l *Leadership) takeOver(ctx context.Context, ev durability.LeaderEvent, prover Prover, purge Purger) error {
	if !ev.IsSelf {
		// Ephemeral locks of p lived here; the new leader starts afresh.
		return purge.DropPartition(ctx, ev.Partition)
	}
	if cur := l.parts[ev.Partition].Load(); cur != nil && cur.term == ev.Term {
		return nil // taken over in this term already (a repeated event)
	}
	t0 := l.now()
	fctx, cancel := context.WithTimeout(ctx, fenceTimeout)
	defer cancel()
	if err := prover.Fence(fctx, ev.Partition, ev.Term); err != nil {
		return err
	}
	reach, err := prover.TokenReach(ev.Partition)
	if err != nil {
		return err
	}
	var grace time.Duration
	if !l.opts.EphemeralFencingOnly {
		if grace, err = prover.EphemeralGrace(ev.Partition); err != nil {
			return err
		}
		// Measured on this node's clock, which may run slow by ρ.
		grace = time.Duration(float64(grace) * (1 + leaseDrift))
	}
	handed, err := prover.HandedOver(ev.Partition)
	if err != nil {
		return err
	}
	l.openWindow(ev.Partition, ev.Term, reach, grace > 0)
	if err := purge.DropPartition(ctx, ev.Partition); err != nil {
		return err
	}
	if len(handed) > 0 {
		// Kept from now for the time each had left when handed over:
		// they end no earlier than on the previous leader.
		if err := purge.Install(ctx, ev.Partition, handed); err != nil {
			return err
		}
		l.logger.Info("kept the ephemeral leases handed over", "partition", ev.Partition, "term", ev.Term, "leases", len(handed))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.latest[ev.Partition] != ev {
		return nil
	}
	if cur := l.parts[ev.Partition].Load(); cur != nil && cur.term == ev.Term {
		return nil // taken over meanwhile (a transfer or membership change may have been requested: keep it so)
	}
	r := &reign{term: ev.Term, until: t0.add(l.opts.Lease)}
	if w := l.opts.TakeoverWait + grace; w > 0 {
		if grace > 0 {
			// Every ephemeral lease of an earlier leader ends by then: it
			// stopped serving within TakeoverWait of t0 (LeaseFor), and
			// none of its leases ran longer than grace after that.
			l.logger.Info("waiting out earlier leaders' ephemeral leases before serving", "partition", ev.Partition, "term", ev.Term, "wait", w.Round(time.Millisecond))
		}
		// Fenced, not serving: renewals keep the lease fresh meanwhile,
		// and begin starts the reign once the wait is over.
		r.waiting = true
		l.parts[ev.Partition].Store(r)
		l.notify()
		// On the monotonic clock: a suspend only makes the wait longer.
		time.AfterFunc(time.Duration(t0.mono+int64(w)-l.mono()), func() { l.begin(ev.Partition, ev.Term) })
		return nil
	}
	l.serveLocked(ev.Partition, r)
	return nil
}

// begin ends the takeover wait of p in term, unless that reign is over.
func (l *Leadership) begin(p int, term uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	cur := l.parts[p].Load()
	if cur == nil || cur.term != term || !cur.waiting {
		return
	}
	next := *cur
	next.waiting = false
	l.serveLocked(p, &next)
	l.endGrace(p, term)
}

// serveLocked starts the reign r of p (through the OnServe hook if set); mu
// must be held.
// The log line says when serving began ("since", read just before), as
// well as when it was written: a process paused in between writes it late,
// and a reader of the log (the process-level fault tests, an operator
// lining up two members' logs) needs the instant the reign may have begun.
func (l *Leadership) serveLocked(p int, r *reign) {
	since := time.Now()
	serve := func() { l.parts[p].Store(r) }
	if l.opts.OnServe != nil {
		l.opts.OnServe(p, r.term, serve)
	} else {
		serve()
	}
	l.notify()
	l.logger.Info("serving partition", "partition", p, "term", r.term, "since", since)
}

// renew keeps the lease of partition p alive while this node serves it:
// every RenewEvery, a Confirm started at t0 extends it to t0 + Lease.
func (l *Leadership) renew(ctx context.Context, prover Prover, p int) {
	tick := time.NewTicker(l.opts.RenewEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		r := l.parts[p].Load()
		if r == nil || r.changing {
			continue
		}
		t0 := l.now()
		if r.relinquish && t0.mono < r.renewAfter {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, l.opts.Lease)
		err := prover.Confirm(cctx, p, r.term)
		cancel()
		if err != nil {
			continue // the lease runs out on its own
		}
		l.mu.Lock()
		// A Suspend since t0 (cur.changing), or a Suspend and Resume (cur
		// is another reign than r), voids this confirmation: it may have
		// been counted in the configuration before the change.
		if cur := l.parts[p].Load(); cur == r && (!cur.relinquish || t0.mono >= cur.renewAfter) {
			l.parts[p].Store(&reign{term: r.term, until: cur.until.later(t0.add(l.opts.Lease)), waiting: cur.waiting})
		}
		l.mu.Unlock()
	}
}

// WaitReady waits until every partition has a known leader and this node
// serves each partition it leads, or ctx ends. A single node then serves
// them all.
func (l *Leadership) WaitReady(ctx context.Context) error {
	for {
		l.mu.Lock()
		all := true
		for p := range l.parts {
			ev := l.latest[p]
			// A reign that waits out earlier ephemeral leases counts: it
			// is up, and answers MustRetry until the grace ends.
			if r := l.parts[p].Load(); ev.LeaderID == 0 || ev.IsSelf && (r == nil || r.waiting && !l.inGrace(p, r.term)) {
				all = false
				break
			}
		}
		changed := l.changed
		l.mu.Unlock()
		if all {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// WaitNotSelf waits until partition p has a leader other than this node,
// or ctx ends.
func (l *Leadership) WaitNotSelf(ctx context.Context, p int) error {
	for {
		l.mu.Lock()
		ev, changed := l.latest[p], l.changed
		l.mu.Unlock()
		if ev.LeaderID != 0 && !ev.IsSelf {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Close stops acting on events and stops serving every partition.
func (l *Leadership) Close() {
	l.mu.Lock()
	for p := range l.parts {
		l.stopServing(p)
	}
	l.mu.Unlock()
	if l.cancel != nil {
		l.cancel()
		<-l.done
	}
}
