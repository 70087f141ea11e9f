package peers

import (
	"context"
	"fmt"
	"log/slog"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kahunago/kahuna/bench"
	"github.com/kahunago/kahuna/lease"
)

// needServer skips t, saying why, unless bin is on PATH: each test starts
// its own server from it on a loopback port (.ci/run installs them).
func needServer(t *testing.T, bin string) {
	t.Helper()
	if _, err := exec.LookPath(bin); err != nil {
		t.Skipf("skipped: %v; this test starts its own %s on a loopback port and needs the binary (apt-get install redis-server etcd-server)", err, bin)
	}
}

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
			needServer(t, c.bin)
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

// etcd's lockers wait with Mutex.Lock: Busy when the wait ends with the
// lock held, granted once it is released; the system counts its RPCs.
func TestEtcdLockWaits(t *testing.T) {
	o := &Options{StartServer: true, EtcdServer: "etcd"}
	needServer(t, o.EtcdServer)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sys, err := EtcdTarget(o).Open(ctx, bench.Settings{TTL: 5 * time.Second, Concurrency: 2, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	a, _ := sys.Locker(ctx, 0)
	b, _ := sys.Locker(ctx, 1)
	wa, wb := a.(lease.WaitLocker), b.(lease.WaitLocker)
	const res = "peers:wait"
	if r, err := wa.Lock(ctx, res, nil, 0, time.Second, lease.Ephemeral); err != nil || r.Status != lease.Locked {
		t.Fatalf("Lock a = %v, %v", r.Status, err)
	}
	start := time.Now()
	if r, err := wb.Lock(ctx, res, nil, 0, 100*time.Millisecond, lease.Ephemeral); err != nil || r.Status != lease.Busy {
		t.Fatalf("Lock b while a holds = %v, %v; want Busy", r.Status, err)
	}
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Errorf("Busy after %v, before the wait ended", d)
	}
	time.AfterFunc(50*time.Millisecond, func() { _, _ = a.Unlock(context.Background(), res, nil, lease.Ephemeral) })
	if r, err := wb.Lock(ctx, res, nil, 0, 5*time.Second, lease.Ephemeral); err != nil || r.Status != lease.Locked {
		t.Fatalf("Lock b after a's release = %v, %v", r.Status, err)
	}
	if n, what := sys.(bench.RequestCounter).Requests(); n < 5 || what == "" {
		t.Errorf("requests %d (%q)", n, what)
	}
}

// etcd's read/write lock (recipe.RWMutex, through Do): two readers hold it
// at once; a writer is granted only once both have released.
func TestEtcdRWMutex(t *testing.T) {
	o := &Options{StartServer: true, EtcdServer: "etcd"}
	needServer(t, o.EtcdServer)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sys, err := EtcdTarget(o).Open(ctx, bench.Settings{TTL: 5 * time.Second, Concurrency: 3, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	const res = lease.RWLockPrefix + "peers"
	take := func(l lease.Locker, shared bool) error {
		c, why := lease.Request{Op: lease.TryLock, Resource: res, Owner: []byte("o"), TTL: 5 * time.Second,
			Durability: lease.Persistent, Wait: lease.WaitForever, Shared: shared}.Check()
		if why != "" {
			t.Fatal(why)
		}
		_, r, err := lease.Do(ctx, l, c)
		if err == nil && r.Status != lease.Locked {
			err = fmt.Errorf("status %v", r.Status)
		}
		return err
	}
	var ls []lease.Locker
	for i := range 3 {
		l, err := sys.Locker(ctx, i)
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	for _, reader := range ls[:2] {
		if err := take(reader, true); err != nil {
			t.Fatalf("a reader beside another: %v", err)
		}
	}
	var released atomic.Int32
	writer := make(chan error, 1)
	go func() {
		err := take(ls[2], false)
		if err == nil && released.Load() != 2 {
			err = fmt.Errorf("the writer was granted with %d of 2 readers released", released.Load())
		}
		writer <- err
	}()
	for _, reader := range ls[:2] {
		time.Sleep(50 * time.Millisecond) // the writer is queued meanwhile: it must not be granted
		released.Add(1)
		if r, err := reader.Unlock(ctx, res, nil, lease.Persistent); err != nil || r.Status != lease.Unlocked {
			t.Fatalf("RUnlock: %v %v", r.Status, err)
		}
	}
	if err := <-writer; err != nil {
		t.Fatal(err)
	}
}
