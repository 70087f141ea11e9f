package peers

import (
	"context"
	"log/slog"
	"os/exec"
	"testing"
	"time"

	"github.com/kahunago/kahuna/bench"
	"github.com/kahunago/kahuna/lease"
)

// The peers' lockers map their systems onto kahuna's statuses. Each case
// starts its server, so it needs the binary (apt-get install redis-server
// etcd-server) and is skipped without it.
func TestPeerLockers(t *testing.T) {
	o := &Options{StartServer: true, RedisServer: "redis-server", EtcdServer: "etcd"}
	for _, c := range []struct {
		target bench.Target
		bin    string
	}{{RedisTarget(o), o.RedisServer}, {EtcdTarget(o), o.EtcdServer}} {
		t.Run(c.target.Name, func(t *testing.T) {
			if _, err := exec.LookPath(c.bin); err != nil {
				t.Skipf("%s not installed", c.bin)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			sys, err := c.target.Open(ctx, bench.Settings{TTL: 5 * time.Second, Concurrency: 2, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := sys.Close(); err != nil {
					t.Error(err)
				}
			}()
			a, err := sys.Locker(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			b, err := sys.Locker(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			ownerA, ownerB := []byte("a"), []byte("b")
			const res = "peers:test"
			check := func(what string, r lease.Result, err error, want lease.Status) {
				t.Helper()
				if err != nil || r.Status != want {
					t.Fatalf("%s = %v, %v; want %v", what, r.Status, err, want)
				}
			}
			r, err := a.TryLock(ctx, res, ownerA, 5*time.Second, lease.Ephemeral)
			check("TryLock a", r, err, lease.Locked)
			r, err = b.TryLock(ctx, res, ownerB, 5*time.Second, lease.Ephemeral)
			check("TryLock b", r, err, lease.Busy)
			_, r, err = b.Get(ctx, res, lease.Ephemeral)
			check("Get", r, err, lease.Got)
			r, err = a.Extend(ctx, res, ownerA, 5*time.Second, lease.Ephemeral)
			check("Extend a", r, err, lease.Extended)
			r, err = a.Unlock(ctx, res, ownerA, lease.Ephemeral)
			check("Unlock a", r, err, lease.Unlocked)
			_, r, err = b.Get(ctx, res, lease.Ephemeral)
			check("Get after unlock", r, err, lease.LockDoesNotExist)
			r, err = b.TryLock(ctx, res, ownerB, 5*time.Second, lease.Ephemeral)
			check("TryLock b again", r, err, lease.Locked)
			r, err = b.Unlock(ctx, res, ownerB, lease.Ephemeral)
			check("Unlock b", r, err, lease.Unlocked)
		})
	}
}
