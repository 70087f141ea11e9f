package transport

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kahunago/kahuna/lease"
)

// BenchmarkClientLockOp measures the client and server over loopback
// against the in-memory fake: each op is a TryLock on a random key out of
// 10,000 and, when granted, its Unlock (two round trips), from 64
// goroutines. ops/s counts those TryLock+Unlock pairs.
func BenchmarkClientLockOp(b *testing.B) {
	for _, listener := range []string{"h2c", "native"} {
		b.Run(listener, func(b *testing.B) {
			srv := startServer(b, newFake(), ServerOptions{})
			addr := srv.mixed
			if listener == "native" {
				addr = srv.native
			}
			c := dial(b, []string{"http://" + addr})
			const keys = 10_000
			names := make([]string, keys)
			for i := range names {
				names[i] = fmt.Sprintf("bench/%d", i)
			}
			var owners atomic.Int64
			ctx := context.Background()
			b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				owner := fmt.Appendf(nil, "owner-%d", owners.Add(1))
				for pb.Next() {
					res := names[rand.IntN(keys)]
					r, err := c.TryLock(ctx, res, owner, time.Minute, lease.Ephemeral)
					if err != nil {
						b.Error(err)
						return
					}
					if r.Status != lease.Locked {
						continue // another goroutine holds it
					}
					if r, err := c.Unlock(ctx, res, owner, lease.Ephemeral); err != nil || r.Status != lease.Unlocked {
						b.Errorf("Unlock = %v, %v", r, err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
		})
	}
}

// BenchmarkClientLatency is the low-load case: one goroutine, one call at
// a time, so ns/op is the round-trip latency of a TryLock.
func BenchmarkClientLatency(b *testing.B) {
	for _, listener := range []string{"h2c", "native"} {
		b.Run(listener, func(b *testing.B) {
			srv := startServer(b, newFake(), ServerOptions{})
			addr := srv.mixed
			if listener == "native" {
				addr = srv.native
			}
			c := dial(b, []string{"http://" + addr})
			ctx := context.Background()
			owner := []byte("owner")
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.TryLock(ctx, "latency", owner, time.Minute, lease.Ephemeral); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkClientHotLock is the hot-lock case: 64 goroutines loop on
// TryLock of one key and Unlock when granted. ns/op is per TryLock;
// grants/s counts successful TryLock+Unlock pairs.
func BenchmarkClientHotLock(b *testing.B) {
	srv := startServer(b, newFake(), ServerOptions{})
	c := dial(b, []string{"http://" + srv.native})
	var owners, grants atomic.Int64
	ctx := context.Background()
	b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		owner := fmt.Appendf(nil, "owner-%d", owners.Add(1))
		for pb.Next() {
			r, err := c.TryLock(ctx, "hot", owner, time.Minute, lease.Ephemeral)
			if err != nil {
				b.Error(err)
				return
			}
			if r.Status != lease.Locked {
				continue
			}
			grants.Add(1)
			if r, err := c.Unlock(ctx, "hot", owner, lease.Ephemeral); err != nil || r.Status != lease.Unlocked {
				b.Errorf("Unlock = %v, %v", r, err)
				return
			}
		}
	})
	b.ReportMetric(float64(grants.Load())/b.Elapsed().Seconds(), "grants/s")
}
