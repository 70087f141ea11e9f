package actors

import (
	"context"
	"testing"
	"time"

	"github.com/kahunago/kahuna/lease"
)

// Live lists the live leases of one partition, of both durabilities, by
// prefix and cursor, in name order over every actor: not an expired or
// released lease, not another partition's, not a name just outside the
// prefix.
func TestLive(t *testing.T) {
	f := newFixture(t, 4, 10)
	ctx := context.Background()
	start := f.clock.Now()
	lock := func(res string, ttl time.Duration, d lease.Durability) int64 {
		t.Helper()
		r := f.do(t, lease.TryLock, res, "o-"+res, ttl, d)
		if r.Status != lease.Locked {
			t.Fatalf("lock %s: %v", res, r.Status)
		}
		return r.Token
	}
	tokA := lock("jobs/a", time.Minute, lease.Ephemeral)
	tokB := lock("jobs/b", 2*time.Minute, lease.Persistent)
	lock("jobs/c", time.Second, lease.Ephemeral) // expires below
	lock("jobs/d", time.Minute, lease.Persistent)
	if r := f.do(t, lease.Unlock, "jobs/d", "o-jobs/d", 0, lease.Persistent); r.Status != lease.Unlocked {
		t.Fatalf("unlock jobs/d: %v", r.Status)
	}
	lock("jobs", time.Minute, lease.Ephemeral)
	lock("jobs0", time.Minute, lease.Ephemeral)
	if r, err := f.ring.Do(ctx, Request{Request: lease.Request{Op: lease.TryLock, Resource: "jobs/x", Owner: []byte("o"), TTL: time.Minute}, Partition: 2}); err != nil || r.Status != lease.Locked {
		t.Fatalf("lock jobs/x in partition 2: %v %v", r, err)
	}
	f.clock.Advance(2 * time.Second)

	names := func(req lease.ListRequest, limit int) []string {
		t.Helper()
		got, err := f.ring.Live(ctx, 1, req, limit)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, l := range got {
			out = append(out, l.Resource)
		}
		return out
	}
	got, err := f.ring.Live(ctx, 1, lease.ListRequest{Prefix: "jobs/"}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("live under jobs/: %+v, want jobs/a and jobs/b", got)
	}
	a, b := got[0], got[1]
	if a.Resource != "jobs/a" || string(a.Owner) != "o-jobs/a" || a.FencingToken != tokA || a.Durability != lease.Ephemeral ||
		!a.Expires.Equal(start.Add(time.Minute).Round(0)) {
		t.Errorf("jobs/a: %+v", a)
	}
	if b.Resource != "jobs/b" || string(b.Owner) != "o-jobs/b" || b.FencingToken != tokB || b.Durability != lease.Persistent ||
		!b.Expires.Equal(start.Add(2*time.Minute).Round(0)) {
		t.Errorf("jobs/b: %+v", b)
	}
	for _, c := range []struct {
		req   lease.ListRequest
		limit int
		want  string
	}{
		{lease.ListRequest{Prefix: "jobs/"}, 1, "[jobs/a]"},
		{lease.ListRequest{Prefix: "jobs/", After: "jobs/a"}, 10, "[jobs/b]"},
		{lease.ListRequest{Prefix: "jobs/", After: "jobs/b"}, 10, "[]"},
		{lease.ListRequest{Prefix: "jobs/", After: "a"}, 10, "[jobs/a jobs/b]"},
		{lease.ListRequest{}, 10, "[jobs jobs/a jobs/b jobs0]"},
		{lease.ListRequest{Prefix: "jobs"}, 3, "[jobs jobs/a jobs/b]"},
		{lease.ListRequest{Prefix: "jobs/a/"}, 10, "[]"},
	} {
		if got := fmtNames(names(c.req, c.limit)); got != c.want {
			t.Errorf("%+v, limit %d: %s, want %s", c.req, c.limit, got, c.want)
		}
	}
	// The owner given is a copy: changing it changes no lease.
	a.Owner[0] = 'X'
	if again, _ := f.ring.Live(ctx, 1, lease.ListRequest{Prefix: "jobs/a"}, 1); string(again[0].Owner) != "o-jobs/a" {
		t.Errorf("owner shared with the cache: %q", again[0].Owner)
	}
	f.ring.Close()
	if _, err := f.ring.Live(ctx, 1, lease.ListRequest{}, 1); err != ErrClosed {
		t.Fatalf("closed ring: %v", err)
	}
}

func fmtNames(names []string) string {
	s := "["
	for i, n := range names {
		if i > 0 {
			s += " "
		}
		s += n
	}
	return s + "]"
}
