package transport

import "sync"

// workers runs a stream's jobs on reusable goroutines. A job is queued and
// wakes the most recently idled worker, or starts a new one when none is
// idle, so every job is served at once, as if on a goroutine of its own; a
// worker that finishes takes the next queued job without a hand-off. A
// goroutine started per job would grow its stack again on every job's way
// down to the lock decision (a profile of one hot lock put 6% of the node's
// CPU in copying the stacks of LockStream's goroutines). Jobs urgent
// reports true for are taken before the others.
type workers[T any] struct {
	serve  func(T)
	urgent func(T) bool // nil: none is
	mu     sync.Mutex
	first  fifo[T] // urgent jobs
	rest   fifo[T]
	idle   []chan struct{} // parked workers, a stack: the warmest is reused first
	closed bool
}

func newWorkers[T any](serve func(T), urgent func(T) bool) *workers[T] {
	return &workers[T]{serve: serve, urgent: urgent}
}

// run queues job for a worker; it never blocks.
func (w *workers[T]) run(job T) {
	w.mu.Lock()
	if w.urgent != nil && w.urgent(job) {
		w.first.push(job)
	} else {
		w.rest.push(job)
	}
	if n := len(w.idle); n > 0 {
		wake := w.idle[n-1]
		w.idle[n-1] = nil
		w.idle = w.idle[:n-1]
		w.mu.Unlock()
		wake <- struct{}{}
		return
	}
	w.mu.Unlock()
	go w.work(make(chan struct{}, 1))
}

func (w *workers[T]) work(wake chan struct{}) {
	for {
		w.mu.Lock()
		job, ok := w.first.pop()
		if !ok {
			job, ok = w.rest.pop()
		}
		if !ok {
			if w.closed {
				w.mu.Unlock()
				return
			}
			w.idle = append(w.idle, wake)
			w.mu.Unlock()
			<-wake
			continue
		}
		w.mu.Unlock()
		w.serve(job)
	}
}

// close ends the workers once the queue is empty.
func (w *workers[T]) close() {
	w.mu.Lock()
	w.closed = true
	idle := w.idle
	w.idle = nil
	w.mu.Unlock()
	for _, wake := range idle {
		wake <- struct{}{}
	}
}

// fifo is a first-in, first-out queue.
type fifo[T any] struct {
	q    []T
	head int
}

func (q *fifo[T]) push(v T) { q.q = append(q.q, v) }

func (q *fifo[T]) pop() (T, bool) {
	var zero T
	if q.head == len(q.q) {
		return zero, false
	}
	v := q.q[q.head]
	q.q[q.head] = zero
	q.head++
	if q.head == len(q.q) {
		q.q, q.head = q.q[:0], 0
	}
	return v, true
}
