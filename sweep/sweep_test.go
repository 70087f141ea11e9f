package sweep

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kahunago/kahuna/durability"
)

type fakeStore struct {
	records map[int][]durability.Record
	cutoffs []int64
}

func (s *fakeStore) Released(p int, cutoffMs int64, after string, limit int, fn func(durability.Record) bool) error {
	s.cutoffs = append(s.cutoffs, cutoffMs)
	sent := 0
	for _, r := range s.records[p] { // in key order
		if r.Resource <= after {
			continue
		}
		if limit > 0 && sent >= limit || !fn(r) {
			break
		}
		sent++
	}
	return nil
}

type fakeForgetter struct {
	asked []string
	keep  map[string]bool // Forget answers false (no longer free)
}

func (f *fakeForgetter) Forget(_ context.Context, _ int, resource string, _ uint64) (bool, error) {
	f.asked = append(f.asked, resource)
	return !f.keep[resource], nil
}

// A pass asks for the removal of the candidates of served partitions only,
// at most Batch per partition, with the cutoff one retention back, and
// counts what was removed.
func TestPass(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	store := &fakeStore{records: map[int][]durability.Record{
		0: {{Resource: "a"}, {Resource: "b"}, {Resource: "c"}},
		1: {{Resource: "not-served"}},
	}}
	forget := &fakeForgetter{keep: map[string]bool{"b": true}}
	s := New(Config{
		Partitions: 2, Retention: time.Minute, Batch: 2, Parallel: 1,
		Serving: func(p int) bool { return p == 0 },
		Now:     func() time.Time { return now },
	}, store, forget)
	if got := s.Pass(context.Background()); got != 1 {
		t.Fatalf("Pass removed %d, want 1 (b is no longer free, c is past the batch)", got)
	}
	if len(forget.asked) != 2 || forget.asked[0] != "a" || forget.asked[1] != "b" {
		t.Fatalf("asked to forget %v, want [a b]", forget.asked)
	}
	if want := now.Add(-time.Minute).UnixMilli(); len(store.cutoffs) != 1 || store.cutoffs[0] != want {
		t.Fatalf("cutoffs %v, want [%d]", store.cutoffs, want)
	}
	if s.Removed() != 1 {
		t.Fatalf("Removed() = %d", s.Removed())
	}
}

// Each pass goes on from where the last stopped, so candidates that stay
// (a lock renewed in its leader's memory past its stored lease, one
// waited on) do not keep those after them from being swept forever.
func TestPassGoesOnWhereTheLastStopped(t *testing.T) {
	store := &fakeStore{records: map[int][]durability.Record{
		0: {{Resource: "a"}, {Resource: "b"}, {Resource: "c"}},
	}}
	forget := &fakeForgetter{keep: map[string]bool{"a": true, "b": true}}
	s := New(Config{Partitions: 1, Retention: time.Minute, Batch: 2, Parallel: 1, Serving: func(int) bool { return true }}, store, forget)
	if got := s.Pass(context.Background()); got != 0 {
		t.Fatalf("first pass removed %d, want 0 (a and b stay)", got)
	}
	if got := s.Pass(context.Background()); got != 1 {
		t.Fatalf("second pass removed %d, want 1 (c, after the first pass's last)", got)
	}
	s.Pass(context.Background()) // the end was reached: from the start again
	if want := []string{"a", "b", "c", "a", "b"}; fmt.Sprint(forget.asked) != fmt.Sprint(want) {
		t.Fatalf("asked to forget %v, want %v", forget.asked, want)
	}
}
