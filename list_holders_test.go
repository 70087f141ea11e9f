package kahuna_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
)

// A listing shows who holds a semaphore's permits (slot, owner, token)
// and a read/write lock's readers: from the cache, over REST, and from the
// store after a restart (when nothing is cached).
func TestListShowsHoldersOfSharedKinds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	n, err := kahuna.Open(kahuna.Config{DataDir: dir, ListenAddress: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { n.Close() }()
	sem := kahuna.NewSemaphore(n, "pool", 3)
	var permits []*kahuna.Permit
	for _, owner := range []string{"worker-a", "worker-b"} {
		p, err := sem.TryAcquire(ctx, 1, kahuna.WithOwner([]byte(owner)), kahuna.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		permits = append(permits, p)
	}
	rw := kahuna.NewRWLock(n, "index")
	for _, owner := range []string{"reader-1", "reader-2"} {
		if _, err := rw.TryRLock(ctx, kahuna.WithOwner([]byte(owner)), kahuna.WithTTL(time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	check := func(where string, page kahuna.LockPage) {
		t.Helper()
		got := map[string][]kahuna.Holder{}
		for _, l := range page.Locks {
			got[l.Resource] = l.Holders
		}
		s := got[kahuna.SemaphorePrefix+"pool"]
		if len(s) != 2 || string(s[0].Owner) != "worker-a" || string(s[1].Owner) != "worker-b" ||
			s[0].Slot != permits[0].Grants()[0].Slot || s[1].FencingToken != permits[1].Grants()[0].Token || s[0].Expires.Before(time.Now()) {
			t.Fatalf("%s: the semaphore's holders %+v", where, s)
		}
		r := got[kahuna.RWLockPrefix+"index"]
		owners := []string{}
		for _, h := range r {
			owners = append(owners, string(h.Owner))
		}
		slices.Sort(owners)
		if !slices.Equal(owners, []string{"reader-1", "reader-2"}) {
			t.Fatalf("%s: the read/write lock's holders %+v", where, r)
		}
	}
	page, err := n.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	check("node", page)
	rest, err := kahuna.Dial(ctx, []string{"http://" + n.ListenAddress()}, kahuna.WithREST())
	if err != nil {
		t.Fatal(err)
	}
	page, err = rest.List(ctx, "")
	rest.Close()
	if err != nil {
		t.Fatal(err)
	}
	check("REST", page)

	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if n, err = kahuna.Open(kahuna.Config{DataDir: dir}); err != nil {
		t.Fatal(err)
	}
	if page, err = n.List(ctx, ""); err != nil {
		t.Fatal(err)
	}
	check("the store, after a restart", page)
}
