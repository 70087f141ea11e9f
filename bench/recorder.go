package bench

import (
	"sync"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

// Histogram range: 1 ns to 1 h at 3 significant digits (0.1% error), which
// covers a sub-microsecond mutex and an open-loop run that falls minutes
// behind. A histogram of that range is about 270 KB.
const (
	histLowest  = 1
	histHighest = int64(time.Hour)
	histDigits  = 3
)

func newHist() *hdr.Histogram { return hdr.New(histLowest, histHighest, histDigits) }

// recordInto adds d to h, clamped to the histogram's range: a value out of
// range must still count.
func recordInto(h *hdr.Histogram, d time.Duration) {
	_ = h.RecordValue(min(max(int64(d), histLowest), histHighest))
}

// row is one line of a report: an operation, or a metric such as handoff
// latency that is reported per row but is not an operation of its own.
type row struct {
	name   string
	metric bool // not an operation: left out of the aggregate
}

// rowStats is what a stripe knows of one row.
type rowStats struct {
	hist                     *hdr.Histogram // successes
	misses, errors, timeouts int64
	errs                     map[string]int64 // error breakdown: message → count
}

// maxErrorKinds bounds the breakdown, so a flood of distinct messages
// (each naming a port, say) cannot grow memory without end.
const maxErrorKinds = 64

// stripe is the share of the samples of a few workers. Workers record into
// their stripe under its mutex; with a handful of stripes per core the
// mutex is almost never contended, and memory stays a few histograms per
// stripe rather than per worker.
type stripe struct {
	mu       sync.Mutex
	rows     []rowStats
	interval *hdr.Histogram // successes of operations since the last live line
	failures int64          // errors and timeouts since the last live line
	_        [64]byte       // keep neighbouring stripes off one cache line
}

// recorder holds every sample of one run.
type recorder struct {
	rows    []row
	stripes []*stripe
}

func newRecorder(rows []row, stripes int) *recorder {
	r := &recorder{rows: rows, stripes: make([]*stripe, stripes)}
	for i := range r.stripes {
		s := &stripe{rows: make([]rowStats, len(rows)), interval: newHist()}
		for j := range s.rows {
			s.rows[j] = rowStats{hist: newHist(), errs: map[string]int64{}}
		}
		r.stripes[i] = s
	}
	return r
}

// stripeFor is the stripe of worker i.
func (r *recorder) stripeFor(i int) *stripe { return r.stripes[i%len(r.stripes)] }

// success records a success of row taking d. measured is false during
// warmup: the sample still feeds the live line.
func (r *recorder) success(s *stripe, rowIdx int, d time.Duration, measured bool) {
	s.mu.Lock()
	if measured {
		recordInto(s.rows[rowIdx].hist, d)
	}
	if !r.rows[rowIdx].metric {
		recordInto(s.interval, d)
	}
	s.mu.Unlock()
}

// miss records a refused TryLock.
func (r *recorder) miss(s *stripe, rowIdx int) {
	s.mu.Lock()
	s.rows[rowIdx].misses++
	s.mu.Unlock()
}

// failure records an error (timeout false) or a timeout, with its message
// for the breakdown. measured is false during warmup: the failure still
// counts on the live line.
func (r *recorder) failure(s *stripe, rowIdx int, msg string, timeout, measured bool) {
	s.mu.Lock()
	s.failures++
	if !measured {
		s.mu.Unlock()
		return
	}
	rs := &s.rows[rowIdx]
	if timeout {
		rs.timeouts++
	} else {
		rs.errors++
	}
	if _, ok := rs.errs[msg]; ok || len(rs.errs) < maxErrorKinds {
		rs.errs[msg]++
	} else {
		rs.errs["(other errors)"]++
	}
	s.mu.Unlock()
}

// takeInterval returns the successes and the number of failures since the
// last call and starts a new interval.
func (r *recorder) takeInterval() (*hdr.Histogram, int64) {
	out, failures := newHist(), int64(0)
	for _, s := range r.stripes {
		s.mu.Lock()
		out.Merge(s.interval)
		s.interval.Reset()
		failures += s.failures
		s.failures = 0
		s.mu.Unlock()
	}
	return out, failures
}

// total merges the stripes' view of row i. Call it once the workers are done.
func (r *recorder) total(i int) rowStats {
	t := rowStats{hist: newHist(), errs: map[string]int64{}}
	for _, s := range r.stripes {
		s.mu.Lock()
		rs := s.rows[i]
		t.hist.Merge(rs.hist)
		t.misses += rs.misses
		t.errors += rs.errors
		t.timeouts += rs.timeouts
		for m, n := range rs.errs {
			t.errs[m] += n
		}
		s.mu.Unlock()
	}
	return t
}
