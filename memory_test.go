package kahuna_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
)

// TestNeverLockedNamesLeaveNoEntries is the measure of names never locked: 100k Gets,
// Unlocks and Extends of names never locked, through a node, leave no
// cache entry (before the fix they left one each).
func TestNeverLockedNamesLeaveNoEntries(t *testing.T) {
	n := openNode(t, kahuna.Config{})
	ctx := context.Background()
	const calls = 100_000
	for i := range calls {
		name := fmt.Sprintf("never-%d", i)
		d := durabilities[i%2]
		var r kahuna.Result
		var err error
		switch i % 3 {
		case 0:
			_, r, err = n.Get(ctx, name, d)
		case 1:
			r, err = n.Unlock(ctx, name, []byte("a"), d)
		default:
			r, err = n.Extend(ctx, name, []byte("a"), time.Minute, d)
		}
		if err != nil || r.Status != kahuna.LockDoesNotExist {
			t.Fatalf("call %d on %s: %v, %v, want LockDoesNotExist", i, name, r.Status, err)
		}
	}
	s := n.Stats()
	t.Logf("after %d Gets/Unlocks/Extends of never-locked names: %d cached entries", calls, s.CachedEntries)
	if s.CachedEntries != 0 {
		t.Fatalf("%d cached entries left behind, want 0", s.CachedEntries)
	}
}
