package kahuna_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/internal/testknobs"
	"github.com/kahunago/kahuna/space"
)

// BenchmarkUniqueNames locks and releases b.N names never used before (one
// lock per job ID), persistent, on one node with a data dir, from 64
// goroutines, and reports what is left: stored records, disk (data dir),
// live heap and cached entries. With the sweep (retention 2 s) the store
// levels off at the names of the last retention or so; without it, it
// grows with every name. For the 1M-name figures:
//
//	go test -run '^$' -bench BenchmarkUniqueNames -benchtime 1000000x -timeout 0 .
func BenchmarkUniqueNames(b *testing.B) {
	for _, bc := range []struct {
		name      string
		retention time.Duration
	}{{"retention=2s", 2 * time.Second}, {"retention=off", -1}} {
		b.Run(bc.name, func(b *testing.B) {
			dir := b.TempDir()
			cfg := testknobs.WithSweepEvery(kahuna.Config{DataDir: dir, ReleasedRetention: bc.retention}, 200*time.Millisecond)
			n, err := kahuna.Open(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer n.Close()
			ctx := context.Background()
			var next atomic.Int64
			report := func(done int64) {
				records, _ := testknobs.StoredRecords(n)
				var ms runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&ms)
				b.Logf("%s: %8d names: %8d records stored, disk %6.1f MB, heap %6.1f MB, %7d cached entries, %8d swept",
					bc.name, done, records, float64(dirBytes(dir))/1e6, float64(ms.HeapAlloc)/1e6, n.Stats().CachedEntries, n.Stats().RecordsSwept)
			}
			every := max(int64(b.N)/10, 1)
			var wg sync.WaitGroup
			b.ResetTimer()
			for range 64 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							return
						}
						res := fmt.Sprintf("job-%d", i)
						for _, op := range []func() (kahuna.Result, error){
							func() (kahuna.Result, error) {
								return n.TryLock(ctx, res, []byte("worker"), time.Minute, kahuna.Persistent)
							},
							func() (kahuna.Result, error) { return n.Unlock(ctx, res, []byte("worker"), kahuna.Persistent) },
						} {
							for {
								r, err := op()
								if err != nil {
									b.Error(err)
									return
								}
								if r.Status != kahuna.MustRetry {
									break
								}
							}
						}
						if i%every == 0 {
							report(i)
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			// Past the retention: what a quiet node keeps.
			if bc.retention > 0 {
				time.Sleep(bc.retention + time.Second)
			}
			records, _ := testknobs.StoredRecords(n)
			var ms runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&ms)
			b.ReportMetric(float64(records), "records-left")
			b.ReportMetric(float64(dirBytes(dir))/1e6, "disk-MB")
			b.ReportMetric(float64(ms.HeapAlloc)/1e6, "heap-MB")
			report(int64(b.N))
		})
	}
}

// dirBytes is the size of the files under dir.
func dirBytes(dir string) int64 {
	n, _ := space.DirSize(dir)
	return int64(n)
}
