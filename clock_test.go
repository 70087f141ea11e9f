package kahuna_test

import (
	"context"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/kahunago/kahuna"
)

// jumpClock reads like time.Now on a machine whose wall clock can be
// stepped (NTP, an operator) while its monotonic clock only moves forward:
// Advance moves both readings, JumpWall moves only the wall reading.
type jumpClock struct {
	mu      sync.Mutex
	base    time.Time // from time.Now: carries a monotonic reading
	elapsed time.Duration
	wall    time.Duration
}

func (c *jumpClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return shiftWall(c.base.Add(c.elapsed), c.wall)
}

func (c *jumpClock) Advance(d time.Duration) { c.mu.Lock(); c.elapsed += d; c.mu.Unlock() }
func (c *jumpClock) JumpWall(d time.Duration) {
	c.mu.Lock()
	c.wall += d
	c.mu.Unlock()
}

// shiftWall returns t with its wall reading moved by d (whole seconds) and
// its monotonic reading kept: what time.Now returns after a wall-clock
// step. No exported API builds such a value, so it edits time.Time's
// fields: with a monotonic reading, bits 30..62 of wall hold seconds since
// 1885. checkShiftWall proves the layout before a test relies on it.
func shiftWall(t time.Time, d time.Duration) time.Time {
	type timeLayout struct {
		wall uint64
		ext  int64
		loc  *time.Location
	}
	p := (*timeLayout)(unsafe.Pointer(&t))
	p.wall = uint64(int64(p.wall) + int64(d/time.Second)<<30)
	return t
}

func checkShiftWall(t *testing.T) {
	t.Helper()
	now := time.Now()
	for _, d := range []time.Duration{time.Hour, -time.Hour} {
		j := shiftWall(now, d)
		if j.Sub(now) != 0 || j.Round(0).Sub(now.Round(0)) != d || j.Nanosecond() != now.Nanosecond() {
			t.Fatalf("time.Time layout changed: shiftWall(%v, %v) = %v (mono diff %v, wall diff %v)",
				now, d, j, j.Sub(now), j.Round(0).Sub(now.Round(0)))
		}
	}
}

// TestWallClockJump: a lease is measured on the monotonic clock of the node
// that granted it (the lease timing contract, docs/semantics.md), so stepping the
// node's wall clock forward must not end a lease early, and stepping it
// back must not extend one.
func TestWallClockJump(t *testing.T) {
	checkShiftWall(t)
	ctx := context.Background()
	for _, d := range durabilities {
		t.Run(d.String(), func(t *testing.T) {
			clk := &jumpClock{base: time.Now()}
			n := openNode(t, kahuna.Config{Clock: clk.Now, Partitions: 2})
			const ttl = 10 * time.Second
			expect := func(what string, r kahuna.Result, err error, want kahuna.Status) {
				t.Helper()
				if err != nil || r.Status != want {
					t.Fatalf("%s: %v %v, want %v", what, r.Status, err, want)
				}
			}
			r, err := n.TryLock(ctx, "jump/a", []byte("a"), ttl, d)
			expect("a locks", r, err, kahuna.Locked)

			clk.Advance(5 * time.Second)
			clk.JumpWall(time.Hour) // the wall clock says the lease ran out long ago
			r, err = n.TryLock(ctx, "jump/a", []byte("b"), ttl, d)
			expect("b after a wall jump forward", r, err, kahuna.Busy)
			info, r, err := n.Get(ctx, "jump/a", d)
			expect("get after a wall jump forward", r, err, kahuna.Got)
			if string(info.Owner) != "a" {
				t.Fatalf("owner %q after a wall jump forward, want a", info.Owner)
			}
			r, err = n.Extend(ctx, "jump/a", []byte("a"), ttl, d)
			expect("a extends after a wall jump forward", r, err, kahuna.Extended)

			clk.JumpWall(-3 * time.Hour) // now the wall clock says 2 h remain
			clk.Advance(ttl - time.Second)
			r, err = n.TryLock(ctx, "jump/a", []byte("b"), ttl, d)
			expect("b just before the extended lease ends", r, err, kahuna.Busy)
			clk.Advance(2 * time.Second) // the extended lease has run out on the monotonic clock
			r, err = n.TryLock(ctx, "jump/a", []byte("b"), ttl, d)
			expect("b after the lease ran out, wall clock behind", r, err, kahuna.Locked)
			if r.FencingToken != 1 {
				t.Fatalf("b's token %d, want 1", r.FencingToken)
			}
		})
	}
}
