package partition

import (
	"fmt"
	"testing"
)

func TestOfSharesPrefix(t *testing.T) {
	for n := 1; n <= 64; n *= 2 {
		if Of("tenant/a/x", n) != Of("tenant/a/y", n) {
			t.Fatalf("n=%d: same prefix, different partitions", n)
		}
	}
}

func TestOfStableAndSpread(t *testing.T) {
	// Pinned values: persistent locks live where this hash says, so it
	// must never change between releases.
	pinned := []struct {
		key  string
		n    int
		want int
	}{{"lock1", 8, 5}, {"a/b/c", 8, 6}, {"tenant/x", 8, 7}, {"lock1", 64, 28}}
	for _, c := range pinned {
		if got := Of(c.key, c.n); got != c.want {
			t.Fatalf("Of(%q, %d) = %d, want %d", c.key, c.n, got, c.want)
		}
	}
	counts := make([]int, 8)
	for i := 0; i < 8000; i++ {
		counts[Of(fmt.Sprintf("key-%d", i), 8)]++
	}
	for p, c := range counts {
		if c < 700 || c > 1300 {
			t.Fatalf("partition %d got %d of 8000 keys: %v", p, c, counts)
		}
	}
	if Of("x", 1) != 0 {
		t.Fatal("one partition must be partition 0")
	}
}

// BenchmarkOf is the partition lookup every request makes: a fresh node's
// one partition, and a cluster's default eight.
func BenchmarkOf(b *testing.B) {
	for _, n := range []int{1, 8} {
		b.Run(fmt.Sprintf("partitions=%d", n), func(b *testing.B) {
			sum := 0
			for b.Loop() {
				sum += Of("bench:123456", n)
			}
			if n == 1 && sum != 0 {
				b.Fatalf("one partition: Of answered %d, want 0 each time", sum)
			}
		})
	}
}
