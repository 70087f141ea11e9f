package node_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/kahunago/kahuna/internal/node"
	"github.com/kahunago/kahuna/lease"
	"github.com/kahunago/kahuna/transport"
)

// BenchmarkDoNowEach measures what a stream's reader spends deciding the
// ephemeral requests of a Batch message (Node.DoNowEach): 32 lock ops,
// TryLocks then their Unlocks as two reads, over 10,000 names, on one
// goroutine, without the wire. ns/op is a lock op's.
//
//	go test -run '^$' -bench DoNowEach ./internal/node
func BenchmarkDoNowEach(b *testing.B) {
	n, err := node.Open(node.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = n.Close() })
	const keys = 10_000
	owner := []byte("bench-owner")
	locks := make([]lease.Checked, keys)
	unlocks := make([]lease.Checked, keys)
	for i := range keys {
		name := "bench:" + strconv.Itoa(i)
		var why string
		if locks[i], why = (lease.Request{Op: lease.TryLock, Resource: name, Owner: owner, TTL: 10 * time.Second}).Check(); why != "" {
			b.Fatal(why)
		}
		if unlocks[i], why = (lease.Request{Op: lease.Unlock, Resource: name, Owner: owner}).Check(); why != "" {
			b.Fatal(why)
		}
	}
	ctx := context.Background()
	for i := range keys { // a name's first request loads its record: not at once
		name := "bench:" + strconv.Itoa(i)
		if _, err := n.TryLock(ctx, name, owner, 10*time.Second, lease.Ephemeral); err != nil {
			b.Fatal(err)
		}
		if _, err := n.Unlock(ctx, name, owner, lease.Ephemeral); err != nil {
			b.Fatal(err)
		}
	}
	later := func(int) transport.Outcome {
		b.Fatal("an ephemeral request on an idle node was not decided at once")
		return nil
	}
	const perRead = 32
	reads := [2][]lease.Checked{make([]lease.Checked, perRead), make([]lease.Checked, perRead)}
	answers := make([]transport.NowAnswer, perRead)
	want := [2]lease.Status{lease.Locked, lease.Unlocked}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += perRead {
		for j := range perRead {
			k := ((i + j) * 7919) % keys // a stride that visits every name, not in order
			reads[0][j], reads[1][j] = locks[k], unlocks[k]
		}
		for r, read := range reads {
			n.DoNowEach(ctx, read, answers, later)
			for j, a := range answers {
				if !a.Now || a.Res.Status != want[r] {
					b.Fatalf("%s: %v now=%v", read[j].Request().Op, a.Res.Status, a.Now)
				}
			}
		}
	}
}
