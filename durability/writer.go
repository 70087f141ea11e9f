package durability

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lni/dragonboat/v4"
	"github.com/lni/dragonboat/v4/client"
)

// Group commit. Each partition has a lane: Propose appends the encoded record
// to the open batch of the lane's bounded queue; one writer goroutine
// proposes the oldest batch as one Raft entry whenever fewer than K
// proposals are in flight; one waiter goroutine settles them in order.
// While K proposals are out, records pile up and leave together: the
// in-flight bound is what makes batches.
const (
	// maxInFlight is K. BenchmarkPropose on 2 cores: at 64 goroutines K=4
	// gives ~42k ops/s (p50 1.2 ms) against ~35k for K=1 (p50 1.7 ms); at
	// 512 goroutines K=1, 2 and 4 tie at ~80k.
	maxInFlight = 4
	// maxBatchRecords and maxBatchBytes cap one entry, far below badger's
	// txn limit (about 1.2 MB) and dragonboat's payload limit.
	maxBatchRecords = 512
	maxBatchBytes   = 256 << 10
	// maxQueued bounds the records waiting in a lane; beyond it Propose
	// answers ErrRetry at once.
	maxQueued = 4096
	// maxFreeBatches bounds the recycled batches a lane keeps.
	maxFreeBatches = 8
)

var (
	errQueueFull     = fmt.Errorf("%w: partition queue full", ErrRetry)
	errTooLarge      = fmt.Errorf("%w: record larger than %d bytes", ErrRetry, maxRecordBytes)
	errClosedRetry   = fmt.Errorf("%w before the record was sent (%w)", ErrClosed, ErrRetry)
	errClosedUnknown = fmt.Errorf("%w while the record was in flight (%w)", ErrClosed, ErrUnknownOutcome)
	errTimedOut      = fmt.Errorf("%w: proposal timed out", ErrUnknownOutcome)
	// dragonboat drops a proposal before appending it (no leader, leader
	// transfer in progress), so a dropped one can never commit.
	errDropped = fmt.Errorf("%w: proposal dropped (no leader or leadership moving)", ErrRetry)
	// A batch decided in a term this node no longer leads is never proposed:
	// dragonboat would forward it to the new leader.
	errNotLeader  = fmt.Errorf("%w: this node no longer leads the term the records were decided in", ErrRetry)
	errRejected   = fmt.Errorf("%w: proposal rejected", ErrUnknownOutcome)
	errAborted    = fmt.Errorf("%w: proposal aborted", ErrUnknownOutcome)
	errTerminated = fmt.Errorf("%w: shard terminated", ErrUnknownOutcome)
)

// batch is one future Raft entry: encoded records of one term and their
// completions.
type batch struct {
	term  uint64
	group bool // a group (pushGroup): applied all or nothing, joined by no other record
	buf   []byte
	comps []Completion
	// opened is when the first record joined; proposed is when the batch
	// was handed to Raft.
	opened, proposed time.Time
}

type flight struct {
	rs  *dragonboat.RequestState
	b   *batch
	err error // Propose failed at once: nothing was sent
}

type lane struct {
	nh           *dragonboat.NodeHost
	shard        uint64
	replica      uint64
	fenced       bool // false: the negative control (RaftConfig.UnsafeNoFence)
	session      *client.Session
	timeout      time.Duration
	batchRecords int
	closing      *atomic.Bool // the backend is shutting down

	mu     sync.Mutex
	closed bool
	queued int      // records in pend
	pend   []*batch // FIFO; only the last one takes new records
	free   []*batch

	proposals atomic.Uint64 // Raft entries settled
	records   atomic.Uint64 // records applied
	failures  atomic.Uint64 // records not applied, whatever the reason
	// Summed over settled entries: the time from the first record's
	// arrival to the proposal (waiting for a slot), and from the proposal
	// to the outcome (append, fsync, commit, apply).
	waitNanos, commitNanos atomic.Int64

	wake    chan struct{} // cap 1: a record arrived in an empty queue
	stop    <-chan struct{}
	slots   chan struct{} // cap K: proposals in flight
	flights chan flight   // cap K: writer to waiter, in order
	done    chan struct{} // closed when the waiter has settled everything
}

func newLane(nh *dragonboat.NodeHost, shard uint64, cfg *resolved, closing *atomic.Bool, stop <-chan struct{}) *lane {
	return &lane{
		nh:           nh,
		shard:        shard,
		replica:      cfg.ReplicaID,
		fenced:       !cfg.UnsafeNoFence,
		session:      nh.GetNoOPSession(shard),
		timeout:      cfg.ProposalTimeout,
		batchRecords: cfg.batchRecords,
		closing:      closing,
		wake:         make(chan struct{}, 1),
		stop:         stop,
		slots:        make(chan struct{}, cfg.inFlight),
		flights:      make(chan flight, cfg.inFlight),
		done:         make(chan struct{}),
	}
}

func (l *lane) start() {
	go l.write()
	go l.wait()
}

// push queues rec without blocking; a refusal completes c at once.
func (l *lane) push(rec *Record, c Completion) {
	size := recordSize(rec)
	if size > maxRecordBytes {
		c.Committed(0, errTooLarge)
		return
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		c.Committed(0, errClosedRetry)
		return
	}
	if l.queued >= maxQueued {
		l.mu.Unlock()
		c.Committed(0, errQueueFull)
		return
	}
	n := len(l.pend)
	var b *batch
	if last := n - 1; n > 0 && !l.pend[last].group && l.pend[last].term == rec.Term && len(l.pend[last].comps) < l.batchRecords && len(l.pend[last].buf)+size <= maxBatchBytes {
		b = l.pend[last]
	} else {
		b = l.newBatch(rec.Term, kindBatch)
		l.pend = append(l.pend, b)
	}
	b.buf = appendRecord(b.buf, rec)
	b.comps = append(b.comps, c)
	l.queued++
	first := l.queued == 1
	l.mu.Unlock()
	if first {
		l.wakeWriter()
	}
}

// pushGroup queues recs as one group entry, applied all or nothing, and
// completes every c in comps with its outcome (the same for all). It does
// not block; a refusal completes them all at once.
func (l *lane) pushGroup(recs []*Record, comps []Completion) {
	fail := func(err error) {
		for _, c := range comps {
			c.Committed(0, err)
		}
	}
	size := 0
	for _, rec := range recs {
		if recs[0].Term != rec.Term {
			fail(fmt.Errorf("%w: a group's records were decided in different terms", ErrRetry))
			return
		}
		if recordSize(rec) > maxRecordBytes {
			fail(errTooLarge)
			return
		}
		size += recordSize(rec)
	}
	switch {
	case len(recs) == 0 || len(recs) != len(comps):
		fail(fmt.Errorf("%w: a group of %d records and %d completions", ErrRetry, len(recs), len(comps)))
		return
	case len(recs) > formatMaxRecords || size > maxBatchBytes:
		fail(fmt.Errorf("%w: a group of %d records, %d bytes, is larger than one entry", ErrRetry, len(recs), size))
		return
	}
	l.mu.Lock()
	if l.closed || l.queued+len(recs) > maxQueued {
		closed := l.closed
		l.mu.Unlock()
		if closed {
			fail(errClosedRetry)
		} else {
			fail(errQueueFull)
		}
		return
	}
	b := l.newBatch(recs[0].Term, kindGroup)
	b.group = true
	for i, rec := range recs {
		b.buf = appendRecord(b.buf, rec)
		b.comps = append(b.comps, comps[i])
	}
	l.pend = append(l.pend, b)
	l.queued += len(recs)
	first := l.queued == len(recs)
	l.mu.Unlock()
	if first {
		l.wakeWriter()
	}
}

// wakeWriter tells the writer that records arrived in an empty queue.
func (l *lane) wakeWriter() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// newBatch needs l.mu.
func (l *lane) newBatch(term uint64, kind byte) *batch {
	var b *batch
	if n := len(l.free); n > 0 {
		b = l.free[n-1]
		l.free = l.free[:n-1]
	} else {
		b = &batch{buf: make([]byte, 0, 4096)}
	}
	b.term, b.group = term, false
	b.opened = time.Now()
	b.buf = appendBatchHeader(b.buf[:0], kind, Epoch{Term: term, Replica: l.replica})
	return b
}

func (l *lane) recycle(b *batch) {
	clear(b.comps)
	b.comps = b.comps[:0]
	b.buf = b.buf[:0]
	l.mu.Lock()
	if len(l.free) < maxFreeBatches {
		l.free = append(l.free, b)
	}
	l.mu.Unlock()
}

// shut refuses new records; the writer fails the queued ones.
func (l *lane) shut() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
}

// write is the writer goroutine.
func (l *lane) write() {
	defer close(l.flights)
	for {
		select {
		case l.slots <- struct{}{}:
		case <-l.stop:
			l.failQueued()
			return
		}
		b := l.next()
		if b == nil {
			l.failQueued()
			return
		}
		b.proposed = time.Now()
		// Never blocks: a slot is held for this flight.
		if l.fenced && !leads(l.nh, l.shard, l.replica, b.term) {
			l.flights <- flight{b: b, err: errNotLeader}
			continue
		}
		rs, err := l.nh.Propose(l.session, b.buf, l.timeout)
		l.flights <- flight{rs: rs, b: b, err: err}
	}
}

// next waits for the oldest queued batch; nil once the lane is shut.
func (l *lane) next() *batch {
	for {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return nil
		}
		if len(l.pend) > 0 {
			b := l.pend[0]
			l.pend = l.pend[:copy(l.pend, l.pend[1:])]
			l.queued -= len(b.comps)
			l.mu.Unlock()
			setBatchCount(b.buf, len(b.comps))
			return b
		}
		l.mu.Unlock()
		select {
		case <-l.wake:
		case <-l.stop:
		}
	}
}

// failQueued completes every unsent record; the lane is shut, so none can
// arrive afterwards.
func (l *lane) failQueued() {
	l.mu.Lock()
	pend := l.pend
	l.pend, l.queued = nil, 0
	l.mu.Unlock()
	for _, b := range pend {
		for _, c := range b.comps {
			c.Committed(0, errClosedRetry)
		}
	}
}

// wait is the waiter goroutine: it settles flights in proposal order.
func (l *lane) wait() {
	defer close(l.done)
	for f := range l.flights {
		l.settle(f)
	}
}

func (l *lane) settle(f flight) {
	var (
		index  uint64 // the entry's index if any of it applied (statemachine.go)
		bitmap []byte
		err    = f.err
	)
	if err != nil {
		err = proposeError(err)
	} else {
		r := <-f.rs.ResultC()
		f.rs.Release()
		err = l.resultError(r)
		res := r.GetResult()
		index, bitmap = res.Value, res.Data
	}
	<-l.slots // the writer may send the next batch while we complete this one
	b := f.b
	l.waitNanos.Add(int64(b.proposed.Sub(b.opened)))
	l.commitNanos.Add(int64(time.Since(b.proposed)))
	l.proposals.Add(1)
	isApplied := func(i int) bool {
		return err == nil && index != 0 && (bitmap == nil || (i/8 < len(bitmap) && bitmap[i/8]&(1<<(i%8)) != 0))
	}
	// Counted before any answer goes out: a caller that has its answer
	// finds its record in Stats.
	var applied uint64
	for i := range b.comps {
		if isApplied(i) {
			applied++
		}
	}
	l.records.Add(applied)
	l.failures.Add(uint64(len(b.comps)) - applied)
	for i, c := range b.comps {
		switch {
		case err != nil:
			c.Committed(0, err)
		case isApplied(i):
			c.Committed(index, nil)
		default:
			c.Committed(0, ErrFenced)
		}
	}
	l.recycle(b)
}

// proposeError maps a refusal by nh.Propose: nothing was sent.
func proposeError(err error) error {
	switch {
	case errors.Is(err, dragonboat.ErrClosed):
		return errClosedRetry
	case errors.Is(err, ErrRetry):
		return err
	}
	return fmt.Errorf("%w: %w", ErrRetry, err)
}

// resultError maps a sent proposal's outcome; anything but Completed may
// still commit later.
func (l *lane) resultError(r dragonboat.RequestResult) error {
	switch {
	case r.Completed():
		return nil
	case r.Terminated() && l.closing.Load():
		return errClosedUnknown
	case r.Terminated():
		return errTerminated
	case r.Timeout():
		return errTimedOut
	case r.Dropped():
		return errDropped
	case r.Rejected():
		return errRejected
	case r.Aborted():
		return errAborted
	default:
		return ErrUnknownOutcome
	}
}
