package kahuna

import (
	"context"
	"errors"
	"testing"
)

// scriptedWatcher ends its first subscriptions with the errors of ends,
// sends one event on the next, and then ends with stop.
type scriptedWatcher struct {
	ends []error
	n    int
}

var errStopWatch = errors.New("stop")

func (w *scriptedWatcher) WatchLock(ctx context.Context, resource string, from uint64, send func(WatchEvent) error) error {
	w.n++
	if w.n <= len(w.ends) {
		return w.ends[w.n-1]
	}
	if w.n == len(w.ends)+1 {
		if err := send(WatchEvent{Kind: EventAcquired, Revision: 1}); err != nil {
			return err
		}
	}
	return errStopWatch
}

// WatchRetryNotice hears of each subscription that ended with MustRetry
// and is made again, and once of the first event after them.
func TestWatchRetryNotice(t *testing.T) {
	mustRetry := &WatchError{Status: MustRetry, Reason: "connection broke"}
	w := &scriptedWatcher{ends: []error{mustRetry, mustRetry}}
	var notices []error
	var events int
	for ev, err := range Watch(context.Background(), w, "r", WatchRetryNotice(func(err error) { notices = append(notices, err) })) {
		if err != nil {
			if !errors.Is(err, errStopWatch) {
				t.Fatalf("watch ended with %v", err)
			}
			break
		}
		if ev.Revision != 1 {
			t.Fatalf("event %+v", ev)
		}
		events++
	}
	if events != 1 || len(notices) != 3 || notices[0] != mustRetry || notices[1] != mustRetry || notices[2] != nil {
		t.Fatalf("%d events, notices %v: want one event after two retries, then nil", events, notices)
	}
}
