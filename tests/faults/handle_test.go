package faults_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/checker"
	"github.com/kahunago/kahuna/partition"
)

// Handle clients hold locks as an application does: through the handle
// (kahuna.Acquire, Lock.Extend, Lock.Unlock), whose deadline (Expires)
// is how long the holder acts as the holder. The server's answers are
// recorded as the other clients' are; what the holder believed is
// recorded as a checker.Hold from the grant to its deadline as it stood
// when the holder stopped, which no other owner's hold window may
// overlap. Two of the handle's protections are what these clients are
// for:
//
//   - A late, short Extend: an Extend whose caller gave up while the
//     request was still on its way (handleOpts.late) is delivered once a
//     later, longer Extend of the same owner was answered, and shortens
//     the server's lease then. The handle caps its deadline for it.
//   - A hand-off of unknown outcome: the waiter must be told Errored,
//     never "not granted", so that its handle counts its deadline from its
//     first attempt (fStallHandOff, with handleOpts.full holders).

// handleOpts is how a run's handle clients behave.
type handleOpts struct {
	// late: half the steps of a hold send a short Extend that is
	// delivered late (after a longer one was answered), then work on past
	// the short lease, as long as the handle lets them.
	late bool
	// full: hold every lock until just before its deadline, without
	// extending it, then unlock (the stall-handoff schedule: the lease of
	// a holder whose Unlock's record is stuck runs out meanwhile).
	full bool
	// renew: hold every lock for two to four TTLs, extending it by its
	// TTL every third of it, as a KeepAlive does (renewals past the first
	// are kept in the leader's memory), while the others wait for it.
	renew bool
	ttl   time.Duration // every grant's (0: faultTTL)
	// acquire is added to every Acquire's options (a control's knob).
	acquire []kahuna.AcquireOption
}

// handleStats counts what a run's handle clients saw.
type handleStats struct {
	holds     atomic.Int64 // locks granted through the handle
	holdsLost atomic.Int64 // of those, ended by their deadline, or by a loss an Extend saw
	// late: short Extends delivered late; lateApplied: those answered
	// Extended (a live lease shortened after a longer Extend).
	late, lateApplied atomic.Int64
	// waitsErrored: waiting Locks answered Errored (a grant of unknown
	// outcome, the waiter may hold the lock); waitsUnknown: answered by a
	// call error.
	waitsErrored, waitsUnknown atomic.Int64
	unlocksErrored             atomic.Int64 // Unlocks answered Errored (a release, or a hand-off, of unknown outcome)
}

func (s *handleStats) String() string {
	return fmt.Sprintf("%d holds (%d lost at their deadline), %d late short extends delivered (%d applied), waits answered Errored %d, unknown %d, unlocks answered Errored %d",
		s.holds.Load(), s.holdsLost.Load(), s.late.Load(), s.lateApplied.Load(), s.waitsErrored.Load(), s.waitsUnknown.Load(), s.unlocksErrored.Load())
}

// lateKey marks an Extend's context: the handleLocker delivers it late.
type lateKey struct{}

// handleClient is one client of the workload that holds locks through the
// handle, with a fresh owner (Acquire's) per lock.
type handleClient struct {
	id  int
	c   *faultCluster
	rec *checker.Recorder
	rng *rand.Rand // the client's goroutine only
	d   kahuna.Durability
	o   handleOpts
	l   *handleLocker
	st  *handleStats
}

func newHandleClient(id int, c *faultCluster, rec *checker.Recorder, seed uint64, d kahuna.Durability, o handleOpts, st *handleStats, unsure chan<- int) *handleClient {
	if o.ttl == 0 {
		o.ttl = faultTTL
	}
	cl := &handleClient{id: id, c: c, rec: rec, rng: rand.New(rand.NewPCG(seed, uint64(id)+100)), d: d, o: o, st: st}
	cl.l = &handleLocker{cl: cl, rng: rand.New(rand.NewPCG(seed, uint64(id)+200)), parked: map[string][]chan struct{}{}, unsure: unsure}
	return cl
}

func (cl *handleClient) run(stop <-chan struct{}, hot []string) {
	defer cl.l.drain()
	for {
		select {
		case <-stop:
			return
		default:
		}
		cl.hold(hot[cl.rng.IntN(len(hot))])
	}
}

// act is the critical section: it holds the lock for d, or until it is
// lost, and reports whether it is still held.
func act(lock *kahuna.Lock, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-lock.Context().Done():
		return false
	case <-t.C:
		return lock.Context().Err() == nil
	}
}

// hold acquires res, works under it (extending it, or not), records what
// the holder believed, and unlocks it.
func (cl *handleClient) hold(res string) {
	opts := []kahuna.AcquireOption{kahuna.WithTTL(cl.o.ttl), kahuna.WithDurability(cl.d)}
	switch {
	case cl.o.renew:
		opts = append(opts, kahuna.WithWait(10*cl.o.ttl))
	case cl.o.full:
		// Waiters stay in the queue through a stalled hand-off.
		opts = append(opts, kahuna.WithWait(3*time.Second+time.Duration(cl.rng.IntN(2000))*time.Millisecond))
	case cl.rng.IntN(4) != 0:
		opts = append(opts, kahuna.WithWait(time.Duration(cl.rng.IntN(1500))*time.Millisecond))
	}
	opts = append(opts, cl.o.acquire...)
	ctx, cancel := context.WithTimeout(context.Background(), faultOpTimeout)
	lock, err := kahuna.Acquire(ctx, cl.l, res, opts...)
	cancel()
	if err != nil {
		pause := time.Duration(cl.rng.IntN(10)) * time.Millisecond
		if !errors.Is(err, kahuna.ErrBusy) {
			pause = time.Duration(50+cl.rng.IntN(100)) * time.Millisecond // as a client seeing timeouts would
		}
		time.Sleep(pause)
		return
	}
	start := cl.rec.Now()
	cl.st.holds.Add(1)
	held := cl.work(lock)
	stopped := cl.rec.Now()
	deadline := cl.rec.At(lock.Expires())
	end := min(stopped, deadline)
	if !held || deadline <= stopped {
		cl.st.holdsLost.Add(1)
	}
	cl.rec.Hold(cl.id, res, string(lock.Owner()), lock.FencingToken(), cl.d == kahuna.Ephemeral, start, end)
	ctx, cancel = context.WithTimeout(context.Background(), faultOpTimeout)
	_ = lock.Unlock(ctx) // a lost lock too: the server frees it early if it is still this owner's
	cancel()
}

// work is a holder's critical section; it reports whether the lock is
// still held at its end.
func (cl *handleClient) work(lock *kahuna.Lock) bool {
	if cl.o.renew {
		for i := 6 + cl.rng.IntN(7); i > 0; i-- {
			if !act(lock, cl.o.ttl/3) {
				return false
			}
			ctx, cancel := context.WithTimeout(context.Background(), faultOpTimeout)
			err := lock.Extend(ctx, cl.o.ttl)
			cancel()
			if errors.Is(err, kahuna.ErrLockLost) {
				return false
			}
		}
		return act(lock, time.Duration(cl.rng.IntN(50))*time.Millisecond)
	}
	if cl.o.full {
		// Up to just before the deadline: the lease runs out soon after the
		// Unlock is sent.
		return act(lock, time.Until(lock.Expires())-time.Duration(cl.rng.IntN(300))*time.Millisecond)
	}
	extend := func(ttl time.Duration) bool {
		ctx, cancel := context.WithTimeout(context.Background(), faultOpTimeout)
		defer cancel()
		err := lock.Extend(ctx, ttl)
		return !errors.Is(err, kahuna.ErrLockLost)
	}
	for i := cl.rng.IntN(4); i > 0; i-- {
		if !act(lock, time.Duration(cl.rng.IntN(100))*time.Millisecond) {
			return false
		}
		if cl.o.late && cl.rng.IntN(2) == 0 {
			// The caller gives up on a short Extend while it is on its
			// way (it is delivered once the next one is answered), extends
			// by the TTL (not longer: an ephemeral lock's next leader waits
			// out the longest), and works on past the short lease for as
			// long as the handle says it holds.
			short := time.Duration(300+cl.rng.IntN(300)) * time.Millisecond
			ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), lateKey{}, true), time.Duration(10+cl.rng.IntN(30))*time.Millisecond)
			_ = lock.Extend(ctx, short) // ctx's error: the outcome is unknown
			cancel()
			if !extend(cl.o.ttl) || !act(lock, time.Duration(1000+cl.rng.IntN(500))*time.Millisecond) {
				return false
			}
			continue
		}
		ttl := cl.o.ttl
		if cl.rng.IntN(3) == 0 {
			ttl = time.Duration(300+cl.rng.IntN(300)) * time.Millisecond
		}
		if !extend(ttl) {
			return false
		}
	}
	return act(lock, time.Duration(cl.rng.IntN(50))*time.Millisecond)
}

// handleLocker is the Locker (a WaitLocker: waits are on the server) a
// handle client's locks are held through. Each call goes to a node that
// says it serves the resource's partition, on its own Locker (three times
// in four) or its forwarding one, and is recorded as the other clients'
// calls are. An Extend whose context carries lateKey is delivered late:
// the call ends with its context (the caller sees an unknown outcome),
// and the request is sent once a later Extend or the Unlock of the same
// owner has been answered, and recorded with its real answer; it may
// take effect anywhere in between, as the checkers allow.
type handleLocker struct {
	cl *handleClient

	mu      sync.Mutex
	rng     *rand.Rand
	parked  map[string][]chan struct{} // late Extends by owner, each waiting for its channel to close
	stopped bool
	late    sync.WaitGroup // late Extends not answered yet

	unsure chan<- int // told the partition of every Unlock answered Errored, if it has room
}

var _ kahuna.WaitLocker = (*handleLocker)(nil)

// route chooses whom to call for res: a node that says it serves its
// partition (nil if none is up).
func (l *handleLocker) route(res string) (target, *kahuna.Node) {
	c := l.cl.c
	l.mu.Lock()
	id := c.servingOf(partition.Of(res, c.partitions), l.rng)
	local := l.rng.IntN(4) != 0
	l.mu.Unlock()
	n := c.Node(id)
	if n == nil {
		return target{}, nil
	}
	return target{node: id, local: local}, n
}

func lockerOf(n *kahuna.Node, to target) kahuna.WaitLocker {
	if to.local {
		return n.Local().(kahuna.WaitLocker)
	}
	return n
}

func (l *handleLocker) begin(to target, kind checker.Kind, res string, owner []byte, ttl time.Duration) *checker.Pending {
	return l.cl.rec.Begin(checker.Op{Client: l.cl.id, Node: to.node, Local: to.local, Ephemeral: l.cl.d == kahuna.Ephemeral,
		Kind: kind, Resource: res, Owner: string(owner), TTL: ttl})
}

// endCall records an answer as lockClient.call does: MustRetry certainly did
// not apply.
func endCall(p *checker.Pending, to target, r kahuna.Result, info kahuna.LockInfo, err error) {
	outcome := checker.Classify(r.Status, err)
	if err == nil && r.Status == kahuna.MustRetry && (to.local || *faultsMustRetry != "unknown") {
		outcome = checker.Fail
	}
	p.EndOutcome(outcome, r.Status, r.FencingToken, string(info.Owner), err)
}

// do sends one call and records it.
func (l *handleLocker) do(ctx context.Context, kind checker.Kind, res string, owner []byte, ttl time.Duration,
	call func(kahuna.WaitLocker) (kahuna.Result, kahuna.LockInfo, error)) (kahuna.Result, kahuna.LockInfo, error) {
	to, n := l.route(res)
	if n == nil {
		time.Sleep(10 * time.Millisecond)
		return kahuna.Result{Status: kahuna.MustRetry}, kahuna.LockInfo{}, nil // nothing sent
	}
	if err := ctx.Err(); err != nil {
		return kahuna.Result{}, kahuna.LockInfo{}, err // nothing sent
	}
	p := l.begin(to, kind, res, owner, ttl)
	r, info, err := call(lockerOf(n, to))
	endCall(p, to, r, info, err)
	return r, info, err
}

func (l *handleLocker) TryLock(ctx context.Context, res string, owner []byte, ttl time.Duration, d kahuna.Durability) (kahuna.Result, error) {
	r, _, err := l.do(ctx, checker.Acquire, res, owner, ttl, func(x kahuna.WaitLocker) (kahuna.Result, kahuna.LockInfo, error) {
		r, err := x.TryLock(ctx, res, owner, ttl, d)
		return r, kahuna.LockInfo{}, err
	})
	return r, err
}

func (l *handleLocker) Lock(ctx context.Context, res string, owner []byte, ttl, wait time.Duration, d kahuna.Durability) (kahuna.Result, error) {
	r, _, err := l.do(ctx, checker.Acquire, res, owner, ttl, func(x kahuna.WaitLocker) (kahuna.Result, kahuna.LockInfo, error) {
		r, err := x.Lock(ctx, res, owner, ttl, wait, d)
		return r, kahuna.LockInfo{}, err
	})
	switch {
	case wait == 0:
	case err == nil && r.Status == kahuna.Errored:
		l.cl.st.waitsErrored.Add(1)
	case err != nil && ctx.Err() == nil:
		l.cl.st.waitsUnknown.Add(1)
	}
	return r, err
}

func (l *handleLocker) Extend(ctx context.Context, res string, owner []byte, ttl time.Duration, d kahuna.Durability) (kahuna.Result, error) {
	if ctx.Value(lateKey{}) != nil {
		return l.extendLate(ctx, res, owner, ttl, d)
	}
	r, _, err := l.do(ctx, checker.Extend, res, owner, ttl, func(x kahuna.WaitLocker) (kahuna.Result, kahuna.LockInfo, error) {
		r, err := x.Extend(ctx, res, owner, ttl, d)
		return r, kahuna.LockInfo{}, err
	})
	l.release(string(owner))
	return r, err
}

func (l *handleLocker) Unlock(ctx context.Context, res string, owner []byte, d kahuna.Durability) (kahuna.Result, error) {
	r, _, err := l.do(ctx, checker.Release, res, owner, 0, func(x kahuna.WaitLocker) (kahuna.Result, kahuna.LockInfo, error) {
		r, err := x.Unlock(ctx, res, owner, d)
		return r, kahuna.LockInfo{}, err
	})
	if err == nil && r.Status == kahuna.Errored {
		l.cl.st.unlocksErrored.Add(1)
		select {
		case l.unsure <- partition.Of(res, l.cl.c.partitions):
		default:
		}
	}
	l.release(string(owner))
	return r, err
}

func (l *handleLocker) Get(ctx context.Context, res string, d kahuna.Durability) (kahuna.LockInfo, kahuna.Result, error) {
	r, info, err := l.do(ctx, checker.Get, res, nil, 0, func(x kahuna.WaitLocker) (kahuna.Result, kahuna.LockInfo, error) {
		info, r, err := x.Get(ctx, res, d)
		return r, info, err
	})
	return info, r, err
}

// extendLate is an Extend delivered late: its call is recorded now, to the
// node chosen now, and it returns when ctx ends; the request goes to that
// node once the owner's next Extend or Unlock has been answered (or the
// client stops), unless the node went down meanwhile (then it is lost, and
// left out of the history: it never arrived).
func (l *handleLocker) extendLate(ctx context.Context, res string, owner []byte, ttl time.Duration, d kahuna.Durability) (kahuna.Result, error) {
	to, n := l.route(res)
	if n == nil {
		return kahuna.Result{Status: kahuna.MustRetry}, nil // nothing sent
	}
	p := l.begin(to, checker.Extend, res, owner, ttl)
	owner = append([]byte(nil), owner...)
	go l.deliver(l.park(string(owner)), func() {
		if l.cl.c.Node(to.node) != n {
			return
		}
		sctx, cancel := context.WithTimeout(context.Background(), faultOpTimeout)
		defer cancel()
		r, err := lockerOf(n, to).Extend(sctx, res, owner, ttl, d)
		endCall(p, to, r, kahuna.LockInfo{}, err)
		l.cl.st.late.Add(1)
		if err == nil && r.Status == kahuna.Extended {
			l.cl.st.lateApplied.Add(1)
		}
	})
	<-ctx.Done()
	return kahuna.Result{}, ctx.Err()
}

// park queues a late request of owner; it is sent once the returned
// channel closes.
func (l *handleLocker) park(owner string) <-chan struct{} {
	ch := make(chan struct{})
	l.mu.Lock()
	defer l.mu.Unlock()
	l.late.Add(1)
	if l.stopped {
		close(ch)
		return ch
	}
	l.parked[owner] = append(l.parked[owner], ch)
	return ch
}

func (l *handleLocker) deliver(release <-chan struct{}, send func()) {
	defer l.late.Done()
	<-release
	send()
}

// release sends owner's late requests.
func (l *handleLocker) release(owner string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ch := range l.parked[owner] {
		close(ch)
	}
	delete(l.parked, owner)
}

// drain sends every late request still parked, and waits for their
// answers.
func (l *handleLocker) drain() {
	l.mu.Lock()
	l.stopped = true
	for owner, chs := range l.parked {
		for _, ch := range chs {
			close(ch)
		}
		delete(l.parked, owner)
	}
	l.mu.Unlock()
	l.late.Wait()
}
