package lease

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestRequestCheck: Request.Check is Check's rule for the fields, then the
// wait's; each bad request gets its exact reason and no Checked, and a
// good one comes back whole.
func TestRequestCheck(t *testing.T) {
	o := []byte("o")
	big := strings.Repeat("x", 2000)
	lock := func(wait time.Duration) Request {
		return Request{Op: TryLock, Resource: "r", Owner: o, TTL: time.Second, Durability: Persistent, Wait: wait}
	}
	for _, c := range []struct {
		name string
		req  Request
		want string
	}{
		{"trylock", lock(0), ""},
		{"lock with a wait", lock(time.Minute), ""},
		{"lock waiting forever", lock(WaitForever), ""},
		{"lock at the wait limit", lock(MaxWait), ""},
		{"get", Request{Op: Get, Resource: "r", Durability: Ephemeral}, ""},
		{"unlock without ttl", Request{Op: Unlock, Resource: "r", Owner: o}, ""},
		{"unknown op", Request{Op: Op(7), Resource: "r", Owner: o, TTL: time.Second}, "op Op(7) is unknown"},
		{"empty resource", Request{Op: Get}, "resource is empty"},
		{"long resource", Request{Op: TryLock, Resource: big, Owner: o, TTL: time.Second}, "resource is 2000 bytes, over the limit of 1024"},
		{"unknown durability", Request{Op: Get, Resource: "r", Durability: 2}, "durability 2 is unknown (0 ephemeral, 1 persistent)"},
		{"no owner", Request{Op: Extend, Resource: "r", TTL: time.Second}, "owner is empty"},
		{"long owner", Request{Op: Unlock, Resource: "r", Owner: []byte(big)}, "owner is 2000 bytes, over the limit of 1024"},
		{"zero ttl", Request{Op: TryLock, Resource: "r", Owner: o}, "ttl 0s is not positive"},
		{"ttl over", Request{Op: Extend, Resource: "r", Owner: o, TTL: MaxTTL + time.Millisecond}, "ttl 596h31m23.648s is over the limit of 596h31m23.647s"},
		{"wait on an extend", Request{Op: Extend, Resource: "r", Owner: o, TTL: time.Second, Wait: time.Second}, "wait is only for a lock, not Extend"},
		{"wait on a get", Request{Op: Get, Resource: "r", Wait: WaitForever}, "wait is only for a lock, not Get"},
		{"negative wait", lock(-time.Second), "wait -1s is negative (only WaitForever, -1ns, waits without a limit)"},
		{"wait over", lock(MaxWait + time.Millisecond), "wait 596h31m23.648s is over the limit of 596h31m23.647s"},
		// The fields come before the wait.
		{"bad ttl and wait", Request{Op: TryLock, Resource: "r", Owner: o, Wait: -5}, "ttl 0s is not positive"},
	} {
		got, why := c.req.Check()
		if why != c.want {
			t.Errorf("%s: Check = %q, want %q", c.name, why, c.want)
			continue
		}
		switch {
		case why != "" && !sameRequest(got.Request(), Request{}):
			t.Errorf("%s: refused, yet Checked = %+v", c.name, got.Request())
		case why == "" && !sameRequest(got.Request(), c.req):
			t.Errorf("%s: Checked carries %+v, want %+v", c.name, got.Request(), c.req)
		}
		if c.req.Wait == 0 && why != Check(c.req.Op, c.req.Resource, c.req.Owner, c.req.TTL, c.req.Durability) {
			t.Errorf("%s: Request.Check says %q, Check says otherwise", c.name, why)
		}
	}
}

func sameRequest(a, b Request) bool {
	return a.Op == b.Op && a.Resource == b.Resource && string(a.Owner) == string(b.Owner) &&
		a.TTL == b.TTL && a.Durability == b.Durability && a.Wait == b.Wait
}

// recorder is a WaitLocker that records which method each call reached.
type recorder struct{ calls []string }

func (r *recorder) TryLock(context.Context, string, []byte, time.Duration, Durability) (Result, error) {
	r.calls = append(r.calls, "TryLock")
	return Result{Status: Locked, FencingToken: 1}, nil
}

func (r *recorder) Extend(context.Context, string, []byte, time.Duration, Durability) (Result, error) {
	r.calls = append(r.calls, "Extend")
	return Result{Status: Extended}, nil
}

func (r *recorder) Unlock(context.Context, string, []byte, Durability) (Result, error) {
	r.calls = append(r.calls, "Unlock")
	return Result{Status: Unlocked}, nil
}

func (r *recorder) Get(_ context.Context, resource string, _ Durability) (LockInfo, Result, error) {
	r.calls = append(r.calls, "Get "+resource)
	return LockInfo{Owner: []byte("o")}, Result{Status: Got}, nil
}

func (r *recorder) Lock(_ context.Context, _ string, _ []byte, _, wait time.Duration, _ Durability) (Result, error) {
	r.calls = append(r.calls, "Lock "+wait.String())
	return Result{Status: Locked}, nil
}

// plain is a Locker that cannot wait.
type plain struct{ *recorder }

func (plain) Lock() {} // hides recorder's: not a WaitLocker

// doer takes requests whole.
type doer struct {
	*recorder
	got []Request
}

func (d *doer) Do(_ context.Context, req Checked) (LockInfo, Result, error) {
	d.got = append(d.got, req.Request())
	return LockInfo{}, Result{Status: Busy}, nil
}

func checked(t *testing.T, r Request) Checked {
	t.Helper()
	c, why := r.Check()
	if why != "" {
		t.Fatal(why)
	}
	return c
}

// TestDo: Do calls the Locker method of the request's op, once; a Doer
// gets the request whole and no method is called.
func TestDo(t *testing.T) {
	ctx := context.Background()
	o := []byte("o")
	for _, c := range []struct {
		req  Request
		want string
		st   Status
	}{
		{Request{Op: TryLock, Resource: "r", Owner: o, TTL: time.Second}, "TryLock", Locked},
		{Request{Op: TryLock, Resource: "r", Owner: o, TTL: time.Second, Wait: time.Second}, "Lock 1s", Locked},
		{Request{Op: Extend, Resource: "r", Owner: o, TTL: time.Second}, "Extend", Extended},
		{Request{Op: Unlock, Resource: "r", Owner: o}, "Unlock", Unlocked},
		{Request{Op: Get, Resource: "g"}, "Get g", Got},
	} {
		rec := &recorder{}
		info, res, err := Do(ctx, rec, checked(t, c.req))
		if err != nil || res.Status != c.st || len(rec.calls) != 1 || rec.calls[0] != c.want {
			t.Errorf("Do(%v) = %+v, %v, calls %v; want %v through %s", c.req.Op, res, err, rec.calls, c.st, c.want)
		}
		if (c.req.Op == Get) != (info.Owner != nil) {
			t.Errorf("Do(%v) info = %+v", c.req.Op, info)
		}
		d := &doer{recorder: &recorder{}}
		if _, res, err := Do(ctx, d, checked(t, c.req)); err != nil || res.Status != Busy ||
			len(d.got) != 1 || !sameRequest(d.got[0], c.req) || len(d.calls) != 0 {
			t.Errorf("Do(%v) on a Doer = %+v, %v, got %+v, calls %v", c.req.Op, res, err, d.got, d.calls)
		}
	}
	// NoWait polls the same request without its wait.
	w := checked(t, Request{Op: TryLock, Resource: "r", Owner: o, TTL: time.Second, Wait: WaitForever})
	if r := w.NoWait().Request(); r.Wait != 0 || r.Resource != "r" || w.Request().Wait != WaitForever {
		t.Errorf("NoWait = %+v (from %+v)", r, w.Request())
	}
}

// TestDoRefusesWhatItCannotSend: a wait on a Locker that cannot wait, and
// the zero Checked, call nothing and say it was not applied.
func TestDoRefusesWhatItCannotSend(t *testing.T) {
	ctx := context.Background()
	p := plain{&recorder{}}
	wait := checked(t, Request{Op: TryLock, Resource: "r", Owner: []byte("o"), TTL: time.Second, Wait: time.Second})
	if _, _, err := Do(ctx, p, wait); !errors.Is(err, ErrNotApplied) || len(p.calls) != 0 {
		t.Errorf("a wait on a Locker that cannot wait = %v, calls %v", err, p.calls)
	}
	rec := &recorder{}
	if _, _, err := Do(ctx, rec, Checked{}); !errors.Is(err, ErrNotApplied) || len(rec.calls) != 0 {
		t.Errorf("the zero Checked = %v, calls %v", err, rec.calls)
	}
}

// TestLockerFunc: each method hands its call over as one Request.
func TestLockerFunc(t *testing.T) {
	var got []Request
	f := LockerFunc(func(_ context.Context, req Request) (LockInfo, Result, error) {
		got = append(got, req)
		return LockInfo{}, Result{Status: Busy}, nil
	})
	ctx := context.Background()
	o := []byte("o")
	f.TryLock(ctx, "a", o, time.Second, Persistent)
	f.Extend(ctx, "b", o, 2*time.Second, Ephemeral)
	f.Unlock(ctx, "c", o, Persistent)
	f.Get(ctx, "d", Ephemeral)
	if _, err := f.Lock(ctx, "e", o, 3*time.Second, WaitForever, Persistent); err != nil {
		t.Fatal(err)
	}
	want := []Request{
		{Op: TryLock, Resource: "a", Owner: o, TTL: time.Second, Durability: Persistent},
		{Op: Extend, Resource: "b", Owner: o, TTL: 2 * time.Second, Durability: Ephemeral},
		{Op: Unlock, Resource: "c", Owner: o, Durability: Persistent},
		{Op: Get, Resource: "d", Durability: Ephemeral},
		{Op: TryLock, Resource: "e", Owner: o, TTL: 3 * time.Second, Durability: Persistent, Wait: WaitForever},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if !sameRequest(got[i], want[i]) {
			t.Errorf("call %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}
