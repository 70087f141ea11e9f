package actors

import (
	"fmt"
	"testing"
	"time"

	"github.com/kahunago/kahuna/lease"
)

// TestNeverLockedLeavesNoEntry: Gets, Unlocks and Extends of names never
// locked (nothing stored, nothing cached) answer LockDoesNotExist and leave
// no cache entry behind.
func TestNeverLockedLeavesNoEntry(t *testing.T) {
	f := newFixture(t, 4, 100)
	const n = 100_000
	ops := []lease.Op{lease.Get, lease.Unlock, lease.Extend}
	for i := range n {
		op := ops[i%len(ops)]
		d := lease.Durability(i % 2)
		if r := f.do(t, op, fmt.Sprintf("never-%d", i), "a", time.Minute, d); r.Status != lease.LockDoesNotExist {
			t.Fatalf("%v never-%d: %+v, want LockDoesNotExist", op, i, r)
		}
	}
	s := f.ring.Stats()
	t.Logf("after %d Gets/Unlocks/Extends of never-locked names: %+v", n, s)
	if s.Entries != 0 {
		t.Fatalf("%d entries left behind, want 0", s.Entries)
	}
}
