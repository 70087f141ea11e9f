package transport

import (
	"testing"
	"time"
)

func TestBackoffGrowsWithJitter(t *testing.T) {
	var b backoff
	ceiling := minBackoff
	for i := range 12 {
		w := b.next()
		if w < ceiling/2 || w > ceiling {
			t.Fatalf("wait %d = %v, want within [%v, %v]", i, w, ceiling/2, ceiling)
		}
		ceiling = min(2*ceiling, maxBackoff)
	}
	if ceiling != maxBackoff {
		t.Fatalf("ceiling reached %v, want the %v cap", ceiling, maxBackoff)
	}
	// At the cap the waits still differ: clients do not retry in step.
	seen := map[time.Duration]bool{}
	for range 20 {
		seen[b.next()] = true
	}
	if len(seen) < 2 {
		t.Fatalf("20 waits at the cap took %d values", len(seen))
	}
}
