package kahuna_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
)

// countingLocker counts the requests that reach the node; it offers
// Lock only if wait is set, so the same node can be measured waiting on
// the server and polling.
type countingLocker struct {
	n        *kahuna.Node
	requests atomic.Int64
}

func (c *countingLocker) TryLock(ctx context.Context, res string, owner []byte, ttl time.Duration, d kahuna.Durability) (kahuna.Result, error) {
	c.requests.Add(1)
	return c.n.TryLock(ctx, res, owner, ttl, d)
}

func (c *countingLocker) Extend(ctx context.Context, res string, owner []byte, ttl time.Duration, d kahuna.Durability) (kahuna.Result, error) {
	c.requests.Add(1)
	return c.n.Extend(ctx, res, owner, ttl, d)
}

func (c *countingLocker) Unlock(ctx context.Context, res string, owner []byte, d kahuna.Durability) (kahuna.Result, error) {
	c.requests.Add(1)
	return c.n.Unlock(ctx, res, owner, d)
}

func (c *countingLocker) Get(ctx context.Context, res string, d kahuna.Durability) (kahuna.LockInfo, kahuna.Result, error) {
	c.requests.Add(1)
	return c.n.Get(ctx, res, d)
}

type waitingLocker struct{ *countingLocker }

func (w waitingLocker) Lock(ctx context.Context, res string, owner []byte, ttl, wait time.Duration, d kahuna.Durability) (kahuna.Result, error) {
	w.requests.Add(1)
	return w.n.Lock(ctx, res, owner, ttl, wait, d)
}

// BenchmarkFairWait is the fairness case: 8 goroutines on one
// lock, each Acquire WithWait(8s), hold 10 ms, Unlock, again. One op is one
// grant. It reports Jain's index of the grants per contender (1 = all
// equal), the requests that reached the node per grant, and the longest
// wait of any Acquire; "server" waits in the actor's FIFO queue, "poll" is
// the same node hidden behind a plain Locker (bounded jittered polling).
//
//	go test -run '^$' -bench FairWait -benchtime 300x .
func BenchmarkFairWait(b *testing.B) {
	for _, d := range durabilities {
		for _, mode := range []string{"server", "poll"} {
			b.Run(d.String()+"/"+mode, func(b *testing.B) {
				n := openNode(b, kahuna.Config{})
				cl := &countingLocker{n: n}
				var l kahuna.Locker = cl
				if mode == "server" {
					l = waitingLocker{cl}
				}
				benchFairWait(b, l, cl, d)
			})
		}
	}
}

func benchFairWait(b *testing.B, l kahuna.Locker, cl *countingLocker, d kahuna.Durability) {
	const contenders = 8
	const hold = 10 * time.Millisecond
	ctx := context.Background()
	var (
		left    atomic.Int64 // grants still to make
		grants  [contenders]int
		maxWait [contenders]time.Duration
		failed  atomic.Int64
		wg      sync.WaitGroup
	)
	left.Store(int64(b.N))
	b.ResetTimer()
	start := time.Now()
	for i := range contenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Load() > 0 {
				t0 := time.Now()
				lk, err := kahuna.Acquire(ctx, l, "fair/one", kahuna.WithWait(8*time.Second), kahuna.WithDurability(d))
				maxWait[i] = max(maxWait[i], time.Since(t0))
				if err != nil {
					failed.Add(1)
					continue
				}
				grants[i]++
				left.Add(-1)
				time.Sleep(hold)
				if err := lk.Unlock(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	var sum, sq float64
	total := 0
	var worst time.Duration
	for i := range contenders {
		x := float64(grants[i])
		sum += x
		sq += x * x
		total += grants[i]
		worst = max(worst, maxWait[i])
	}
	b.ReportMetric(sum*sum/(contenders*sq), "jain")
	b.ReportMetric(float64(cl.requests.Load())/float64(total), "req/grant")
	b.ReportMetric(float64(worst.Milliseconds()), "max-wait-ms")
	b.ReportMetric(float64(total)/elapsed.Seconds(), "grants/s")
	b.ReportMetric(float64(failed.Load()), "busy-acquires")
	b.Logf("grants per contender: %v", grants)
}
