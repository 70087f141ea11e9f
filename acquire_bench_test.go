package kahuna_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/transport"
)

// BenchmarkAcquireWithDeadline: Acquire and Unlock of an ephemeral lock
// (10,000 names, 32 goroutines) under a context with a deadline, on the
// embedded node and through a Client over gRPC to a node in this
// process. Over the wire such an Acquire runs its attempt on a goroutine
// of its own, so that its clean-up, if the deadline passes first, follows
// the attempt's answer (detached in lock.go): this measures that cost.
func BenchmarkAcquireWithDeadline(b *testing.B) {
	n, err := kahuna.Open(kahuna.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer n.Close()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := transport.NewServer(n, transport.ServerOptions{Logger: slog.New(slog.DiscardHandler)})
	go func() { _ = srv.ServeGRPC(lis) }()
	defer srv.Close()
	c, err := kahuna.Dial(context.Background(), []string{"http://" + lis.Addr().String()})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for _, target := range []struct {
		name string
		l    kahuna.Locker
	}{{"embedded", n}, {"wire", c}} {
		b.Run(target.name, func(b *testing.B) {
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					i++
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					lk, err := kahuna.Acquire(ctx, target.l, fmt.Sprint("k", i%10000), kahuna.WithDurability(kahuna.Ephemeral))
					if err == nil {
						_ = lk.Unlock(ctx)
					}
					cancel()
				}
			})
		})
	}
}
