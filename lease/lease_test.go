package lease

import (
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func held(owner string, token int64, expires time.Time) Entry {
	return Entry{State: Held, Owner: []byte(owner), Expires: expires, Token: token, Revision: 7}
}

// TestDecide pins every row of the semantics table (docs/semantics.md) that the decision owns.
func TestDecide(t *testing.T) {
	live := held("a", 5, t0.Add(time.Second))
	lapsed := held("a", 5, t0.Add(-time.Millisecond))
	atExpiry := held("a", 5, t0)
	released := Entry{State: Released, Token: 5, Revision: 7, Expires: t0.Add(-time.Hour)}
	cases := []struct {
		name      string
		e         Entry
		op        Op
		owner     string
		ttl       time.Duration
		status    Status
		token     int64
		write     bool
		nextToken int64
	}{
		{"trylock never-seen gets token 0", Entry{}, TryLock, "a", time.Second, Locked, 0, true, 0},
		{"trylock other owner while live is busy", live, TryLock, "b", time.Second, Busy, 0, false, 0},
		{"trylock same owner while live keeps token", live, TryLock, "a", time.Hour, Locked, 5, false, 0},
		{"lease is live at its expiry instant", atExpiry, TryLock, "b", time.Second, Busy, 0, false, 0},
		{"trylock after expiry bumps token", lapsed, TryLock, "b", time.Second, Locked, 6, true, 6},
		{"trylock same owner after expiry bumps token", lapsed, TryLock, "a", time.Second, Locked, 6, true, 6},
		{"trylock after unlock bumps token", released, TryLock, "b", time.Second, Locked, 6, true, 6},
		{"extend unknown", Entry{}, Extend, "a", time.Second, LockDoesNotExist, 0, false, 0},
		{"extend released", released, Extend, "a", time.Second, LockDoesNotExist, 0, false, 0},
		{"extend expired checks expiry before owner", lapsed, Extend, "b", time.Second, LockDoesNotExist, 0, false, 0},
		{"extend non-owner live", live, Extend, "b", time.Second, InvalidOwner, 0, false, 0},
		{"extend owner live", live, Extend, "a", time.Second, Extended, 5, true, 5},
		{"unlock unknown", Entry{}, Unlock, "a", 0, LockDoesNotExist, 0, false, 0},
		{"unlock released", released, Unlock, "a", 0, LockDoesNotExist, 0, false, 0},
		{"unlock non-owner live", live, Unlock, "b", 0, InvalidOwner, 0, false, 0},
		{"unlock non-owner expired", lapsed, Unlock, "b", 0, InvalidOwner, 0, false, 0},
		{"unlock owner live", live, Unlock, "a", 0, Unlocked, 0, true, 5},
		{"unlock owner expired not retaken", lapsed, Unlock, "a", 0, Unlocked, 0, true, 5},
		{"get unknown", Entry{}, Get, "", 0, LockDoesNotExist, 0, false, 0},
		{"get released", released, Get, "", 0, LockDoesNotExist, 0, false, 0},
		{"get expired", lapsed, Get, "", 0, LockDoesNotExist, 0, false, 0},
		{"get live", live, Get, "", 0, Got, 5, false, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := Decide(c.e, c.op, []byte(c.owner), c.ttl, t0)
			if d.Status != c.status || d.Token != c.token || d.Write != c.write {
				t.Fatalf("got %v token %d write %v, want %v token %d write %v", d.Status, d.Token, d.Write, c.status, c.token, c.write)
			}
			if d.Write {
				if d.Next.Token != c.nextToken {
					t.Fatalf("next token %d, want %d", d.Next.Token, c.nextToken)
				}
				if d.Next.Revision != c.e.Revision+1 {
					t.Fatalf("next revision %d, want %d", d.Next.Revision, c.e.Revision+1)
				}
			}
		})
	}
}

func TestDecideNextEntry(t *testing.T) {
	live := held("a", 5, t0.Add(time.Hour))
	t.Run("grant sets owner and expiry", func(t *testing.T) {
		d := Decide(Entry{}, TryLock, []byte("b"), 3*time.Second, t0)
		if d.Next.State != Held || string(d.Next.Owner) != "b" || !d.Next.Expires.Equal(t0.Add(3*time.Second)) {
			t.Fatalf("next = %+v", d.Next)
		}
	})
	t.Run("extend sets expiry to now+ttl and may shorten", func(t *testing.T) {
		d := Decide(live, Extend, []byte("a"), time.Second, t0)
		if !d.Next.Expires.Equal(t0.Add(time.Second)) || string(d.Next.Owner) != "a" || d.Next.State != Held {
			t.Fatalf("next = %+v", d.Next)
		}
	})
	t.Run("unlock clears owner and keeps token", func(t *testing.T) {
		d := Decide(live, Unlock, []byte("a"), 0, t0)
		if d.Next.State != Released || d.Next.Owner != nil || d.Next.Token != 5 {
			t.Fatalf("next = %+v", d.Next)
		}
		if again := Decide(d.Next, TryLock, []byte("c"), time.Second, t0); again.Token != 6 {
			t.Fatalf("grant after unlock token %d, want 6", again.Token)
		}
	})
	t.Run("same owner relock does not refresh expiry", func(t *testing.T) {
		d := Decide(live, TryLock, []byte("a"), 100*time.Hour, t0)
		if d.Write {
			t.Fatal("same-owner relock must not write")
		}
	})
}

func TestValid(t *testing.T) {
	long := strings.Repeat("x", MaxResourceBytes+1)
	ok := []byte("o")
	cases := []struct {
		name string
		op   Op
		res  string
		own  []byte
		ttl  time.Duration
		d    Durability
		want bool
	}{
		{"trylock ok", TryLock, "r", ok, time.Second, Persistent, true},
		{"empty resource", TryLock, "", ok, time.Second, Ephemeral, false},
		{"empty owner", TryLock, "r", nil, time.Second, Ephemeral, false},
		{"zero ttl", TryLock, "r", ok, 0, Ephemeral, false},
		{"negative ttl", Extend, "r", ok, -time.Second, Ephemeral, false},
		{"ttl at max", Extend, "r", ok, MaxTTL, Ephemeral, true},
		{"ttl over max", TryLock, "r", ok, MaxTTL + time.Millisecond, Ephemeral, false},
		{"resource at limit", TryLock, long[:MaxResourceBytes], ok, time.Second, Ephemeral, true},
		{"resource over limit", Get, long, nil, 0, Ephemeral, false},
		{"owner over limit", Unlock, "r", []byte(long), 0, Ephemeral, false},
		{"unknown durability", TryLock, "r", ok, time.Second, Durability(2), false},
		{"negative durability", Get, "r", nil, 0, Durability(-1), false},
		{"unlock empty owner", Unlock, "r", []byte{}, 0, Persistent, false},
		{"unlock ignores ttl", Unlock, "r", ok, 0, Persistent, true},
		{"get ignores owner", Get, "r", nil, 0, Persistent, true},
		{"unknown op", Op(9), "r", ok, time.Second, Persistent, false},
	}
	for _, c := range cases {
		if got := Valid(c.op, c.res, c.own, c.ttl, c.d); got != c.want {
			t.Errorf("%s: Valid = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestStrings(t *testing.T) {
	if Busy.String() != "Busy" || Status(77).String() != "Status(77)" || Persistent.String() != "Persistent" || Extend.String() != "Extend" {
		t.Fatal("String() mismatch")
	}
}
