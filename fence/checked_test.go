package fence_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/kahunago/kahuna/fence"
)

// service is a lock service as a HolderCheck sees it: the live holder's
// token, -1 when no one holds the lock.
type service struct {
	live  int64
	err   error
	calls int
}

func (s *service) check(_ context.Context, tok fence.Token) (bool, int64, error) {
	s.calls++
	if s.err != nil {
		return false, 0, s.err
	}
	return s.live >= 0 && uint64(s.live) == tok.Value, s.live, nil
}

func TestCheckedStore(t *testing.T) {
	down := errors.New("connection refused")
	for _, tc := range []struct {
		name     string
		mark     int64 // a write landed first with this token (-1: none)
		live     int64 // the service's live holder (-1: none)
		err      error
		tok      uint64
		wrote    bool
		stale    bool
		lapsed   bool
		current  uint64
		checked  bool   // the service was asked
		contains string // in the error
	}{
		{name: "live holder writes", mark: -1, live: 5, tok: 5, wrote: true, checked: true},
		{name: "live holder above the mark", mark: 3, live: 5, tok: 5, wrote: true, checked: true},
		// The GC-pause trap's first write: nothing newer landed yet, so
		// the mark alone admits it; the service knows the lease ended.
		{name: "lease ended, no one wrote since", mark: 3, live: -1, tok: 3, stale: true, lapsed: true, checked: true, contains: "lease ended"},
		{name: "a later holder holds, has not written", mark: 3, live: 4, tok: 3, stale: true, current: 4, checked: true, contains: "below 4"},
		{name: "below the mark: the service is not asked", mark: 6, live: 6, tok: 5, stale: true, current: 6, contains: "below 6"},
		{name: "service unreachable: fails closed", mark: -1, err: down, tok: 5, checked: true, contains: "connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inner := fence.NewMemoryStore()
			if tc.mark >= 0 {
				if err := inner.Fence(context.Background(), "row", fence.Token{Lock: "job", Value: uint64(tc.mark)}, func(context.Context) error { return nil }); err != nil {
					t.Fatal(err)
				}
			}
			svc := &service{live: tc.live, err: tc.err}
			s := fence.Checked(inner, svc.check)
			wrote := false
			err := s.Fence(context.Background(), "row", fence.Token{Lock: "job", Value: tc.tok}, func(context.Context) error { wrote = true; return nil })
			if wrote != tc.wrote {
				t.Errorf("write ran: %v, want %v (err %v)", wrote, tc.wrote, err)
			}
			if (svc.calls > 0) != tc.checked {
				t.Errorf("service asked %d times, want asked: %v", svc.calls, tc.checked)
			}
			mark, _ := inner.Mark("row", "job", "")
			if tc.wrote {
				if err != nil || mark != tc.tok {
					t.Errorf("err %v, mark %d, want nil and %d", err, mark, tc.tok)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.contains) {
				t.Fatalf("err %v, want one containing %q", err, tc.contains)
			}
			if tc.mark >= 0 && mark != uint64(tc.mark) {
				t.Errorf("mark %d after a refused write, want %d unchanged", mark, tc.mark)
			}
			var stale *fence.StaleError
			if got := errors.As(err, &stale); got != tc.stale {
				t.Fatalf("err %v is a StaleError: %v, want %v", err, got, tc.stale)
			}
			if tc.stale && (stale.Lapsed != tc.lapsed || stale.Current != tc.current) {
				t.Errorf("StaleError lapsed %v current %d, want %v and %d", stale.Lapsed, stale.Current, tc.lapsed, tc.current)
			}
			if tc.err != nil && !errors.Is(err, tc.err) {
				t.Errorf("err %v does not wrap the service's error", err)
			}
		})
	}
}
