package fence_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/kahunago/kahuna/fence"
	"github.com/kahunago/kahuna/fence/internal/fencetest"
)

func TestValidate(t *testing.T) {
	long := strings.Repeat("x", fence.MaxNameLen+1)
	for _, tc := range []struct {
		tok    fence.Token
		reason string // "" when valid
	}{
		{fence.Token{Lock: "jobs/export"}, ""},
		{fence.Token{Lock: "jobs/export", Slot: "read", Value: fence.MaxValue}, ""},
		{fence.Token{Lock: long[:fence.MaxNameLen], Slot: long[:fence.MaxNameLen]}, ""},
		{fence.Token{Value: 1}, "lock name is empty"},
		{fence.Token{Lock: long}, "lock name is 1025 bytes, over the limit of 1024"},
		{fence.Token{Lock: "a", Slot: long}, "slot is 1025 bytes, over the limit of 1024"},
		{fence.Token{Lock: "a", Value: fence.MaxValue + 1}, "token 9223372036854775808 is over the limit of 9223372036854775807"},
	} {
		err := tc.tok.Validate()
		if tc.reason == "" {
			if err != nil {
				t.Errorf("%v: %v", tc.tok, err)
			}
			continue
		}
		if !errors.Is(err, fence.ErrInvalid) || !strings.Contains(err.Error(), tc.reason) {
			t.Errorf("%v: %v, want ErrInvalid with %q", tc.tok, err, tc.reason)
		}
	}
}

func TestTokenOf(t *testing.T) {
	if tok, err := fence.TokenOf("l", "s", 7); err != nil || tok != (fence.Token{Lock: "l", Slot: "s", Value: 7}) {
		t.Fatalf("TokenOf 7: %v %v", tok, err)
	}
	for _, bad := range []struct {
		lock  string
		value int64
		want  string
	}{{"l", -1, "token -1 is negative"}, {"", 1, "lock name is empty"}} {
		if _, err := fence.TokenOf(bad.lock, "", bad.value); !errors.Is(err, fence.ErrInvalid) || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("TokenOf(%q, %d): %v, want %q", bad.lock, bad.value, err, bad.want)
		}
	}
}

func TestAdmit(t *testing.T) {
	for _, tc := range []struct {
		mark uint64
		ok   bool
		tok  uint64
		want bool
	}{
		{0, false, 0, true}, // no mark yet: the first grant's token 0 passes
		{5, true, 5, true},  // the holder's own second write
		{5, true, 6, true},  // a later holder
		{5, true, 4, false}, // a stale holder
		{0, true, 0, true},  // mark 0 set by token 0
	} {
		if got := fence.Admit(tc.mark, tc.ok, tc.tok); got != tc.want {
			t.Errorf("Admit(%d, %v, %d) = %v, want %v", tc.mark, tc.ok, tc.tok, got, tc.want)
		}
	}
}

func TestStaleError(t *testing.T) {
	var err error = &fence.StaleError{Resource: "r", Token: fence.Token{Lock: "l", Value: 3}, Current: 7}
	err = errors.Join(errors.New("context"), err)
	var stale *fence.StaleError
	if !errors.As(err, &stale) || stale.Current != 7 || !errors.Is(err, fence.ErrStale) {
		t.Fatalf("errors.As/Is failed on %v", err)
	}
	if want := `fence: stale token: "l" token 3 is below 7, the mark of resource "r"`; stale.Error() != want {
		t.Fatalf("Error() = %q, want %q", stale.Error(), want)
	}
}

func TestMemoryStoreRule(t *testing.T) {
	ctx := context.Background()
	s := fence.NewMemoryStore()
	var value []uint64
	write := func(tok uint64) func(context.Context) error {
		return func(context.Context) error { value = append(value, tok); return nil }
	}
	tok := func(v uint64) fence.Token { return fence.Token{Lock: "l", Value: v} }
	for _, v := range []uint64{1, 1, 2} {
		if err := s.Fence(ctx, "r", tok(v), write(v)); err != nil {
			t.Fatalf("token %d: %v", v, err)
		}
	}
	err := s.Fence(ctx, "r", tok(1), write(1))
	var stale *fence.StaleError
	if !errors.As(err, &stale) || stale.Current != 2 || stale.Resource != "r" {
		t.Fatalf("token 1 after 2: %v, want stale with current 2", err)
	}
	// Other resources, locks and slots have marks of their own.
	for _, k := range []struct{ res, lock, slot string }{{"r2", "l", ""}, {"r", "l2", ""}, {"r", "l", "s"}} {
		if err := s.Fence(ctx, k.res, fence.Token{Lock: k.lock, Slot: k.slot, Value: 0}, write(0)); err != nil {
			t.Fatalf("%v: %v", k, err)
		}
	}
	if m, ok := s.Mark("r", "l", ""); !ok || m != 2 {
		t.Fatalf("mark %d %v, want 2", m, ok)
	}
	if want := []uint64{1, 1, 2, 0, 0, 0}; len(value) != len(want) {
		t.Fatalf("value %v, want %v", value, want)
	}
}

func TestMemoryStoreFailedWriteKeepsMark(t *testing.T) {
	ctx := context.Background()
	s := fence.NewMemoryStore()
	if err := s.Fence(ctx, "r", fence.Token{Lock: "l", Value: 3}, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("disk full")
	err := s.Fence(ctx, "r", fence.Token{Lock: "l", Value: 9}, func(context.Context) error { return boom })
	if !errors.Is(err, boom) || errors.Is(err, fence.ErrStale) {
		t.Fatalf("failed write: %v, want the write's error, not stale", err)
	}
	if m, _ := s.Mark("r", "l", ""); m != 3 {
		t.Fatalf("mark %d after a failed write, want 3", m)
	}
	err = s.Fence(ctx, "r", fence.Token{Lock: "", Value: 9}, func(context.Context) error { t.Fatal("write ran"); return nil })
	if !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("empty lock: %v", err)
	}
}

func TestMemoryStoreWaitEndsWithContext(t *testing.T) {
	s := fence.NewMemoryStore()
	tok := fence.Token{Lock: "l", Value: 1}
	inside, release := make(chan struct{}), make(chan struct{})
	done := make(chan error)
	go func() {
		done <- s.Fence(context.Background(), "r", tok, func(context.Context) error { close(inside); <-release; return nil })
	}()
	<-inside
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Fence(ctx, "r", tok, func(context.Context) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("Fence on a held key with a cancelled ctx: %v", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestMemoryStoreConcurrent(t *testing.T) {
	s := fence.NewMemoryStore()
	var landed []uint64 // appended only inside a fenced write
	out := fencetest.Hammer(context.Background(), 16, 200, 1, func(ctx context.Context, tok uint64) error {
		return s.Fence(ctx, "value", fence.Token{Lock: "l", Value: tok}, func(context.Context) error {
			landed = append(landed, tok)
			return nil
		})
	})
	fencetest.Check(t, landed, out)
}
