package checker

import (
	"slices"
	"testing"
	"time"
)

func act(holder, slot int, write bool, token int64, from, to int) Act {
	return Act{Holder: holder, Slot: slot, Write: write, Token: token, Start: time.Duration(from) * time.Millisecond, End: time.Duration(to) * time.Millisecond}
}

func kinds(vs []Violation) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Checker+"/"+v.Kind)
	}
	return out
}

func TestCheckPermits(t *testing.T) {
	for _, c := range []struct {
		name string
		acts []Act
		want []string
	}{
		{"two of two, then the slot again above", []Act{act(1, 0, false, 1, 0, 10), act(2, 1, false, 1, 5, 15), act(3, 0, false, 2, 10, 20)}, nil},
		{"three of two", []Act{act(1, 0, false, 1, 0, 10), act(2, 1, false, 1, 5, 15), act(3, 0, false, 2, 9, 20)},
			[]string{"semaphore/over-limit"}},
		{"one token, two holders", []Act{act(1, 0, false, 1, 0, 10), act(2, 0, false, 1, 20, 30)}, []string{"semaphore/token-twice"}},
		{"a token below one that acted", []Act{act(1, 0, false, 2, 0, 10), act(2, 0, false, 1, 20, 30)}, []string{"semaphore/token-backwards"}},
		{"overlapping acts of other slots' lower tokens are fine", []Act{act(1, 0, false, 5, 0, 10), act(2, 1, false, 1, 20, 30)}, nil},
	} {
		if got := kinds(CheckPermits(c.acts, 2)); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestCheckRWLock(t *testing.T) {
	for _, c := range []struct {
		name string
		acts []Act
		want []string
	}{
		{"readers share, then a writer alone", []Act{act(1, 0, false, 0, 0, 10), act(2, 0, false, 0, 5, 15), act(3, 0, true, 1, 15, 20), act(4, 0, false, 1, 21, 30)}, nil},
		{"a writer beside a reader", []Act{act(1, 0, false, 0, 0, 10), act(3, 0, true, 1, 9, 20)}, []string{"rwlock/writer-beside-holder"}},
		{"two writers, one epoch", []Act{act(1, 0, true, 1, 0, 10), act(2, 0, true, 1, 20, 30)}, []string{"rwlock/epoch-two-writers"}},
		{"a read under an epoch before a write that acted", []Act{act(1, 0, true, 2, 0, 10), act(2, 0, false, 1, 20, 30)}, []string{"rwlock/epoch-backwards"}},
	} {
		if got := kinds(CheckRWLock(c.acts)); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
