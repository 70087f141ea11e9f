package kahuna_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
)

// BenchmarkWireHandOff is one hot lock handed on over the wire: a node
// served on loopback, one Client on kahuna's framing, and 16 goroutines
// that each Lock with a wait, Unlock at once, and ask again. One op is
// one grant. Client and node share this process, so it reports what the
// hand-off's code costs (ns and allocations a grant, both ends together)
// without the scheduling between two processes that kahuna-bench's
// hot-wait workload measures.
//
//	go test -run '^$' -bench WireHandOff -benchtime 20000x .
func BenchmarkWireHandOff(b *testing.B) {
	const contenders = 16
	n := openNode(b, kahuna.Config{ListenAddress: "127.0.0.1:0"})
	ctx := context.Background()
	c, err := kahuna.Dial(ctx, []string{"http://" + n.ListenAddress()})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	var grants atomic.Int64
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	for range contenders {
		wg.Go(func() {
			owner := kahuna.NewOwner()
			for grants.Add(1) <= int64(b.N) {
				r, err := c.Lock(ctx, "hot", owner, time.Minute, 10*time.Second, kahuna.Ephemeral)
				if err != nil || r.Status != kahuna.Locked {
					b.Errorf("Lock: %+v, %v", r, err)
					return
				}
				if r, err := c.Unlock(ctx, "hot", owner, kahuna.Ephemeral); err != nil || r.Status != kahuna.Unlocked {
					b.Errorf("Unlock: %+v, %v", r, err)
					return
				}
			}
		})
	}
	wg.Wait()
}
