package kahuna

import (
	"context"
	"errors"
	"iter"
	"time"

	"github.com/kahunago/kahuna/internal/backoff"
	"github.com/kahunago/kahuna/transport"
)

// WatchEvent is one change of a watched lock: acquired (by Owner, with
// FencingToken, until Expires), extended, released, or expired, with the
// lock's Revision. The first event of a watch is its current state
// (Current set).
type WatchEvent = transport.WatchEvent

// EventKind says what changed.
type EventKind = transport.EventKind

const (
	EventAcquired = transport.EventAcquired
	EventExtended = transport.EventExtended
	EventReleased = transport.EventReleased
	EventExpired  = transport.EventExpired
)

// WatchError ends a watch with a status: InvalidInput (Reason says why,
// e.g. an empty name) or Busy (too many watchers of the lock). Watch
// resumes by itself after MustRetry.
type WatchError = transport.WatchError

// WatchOption tunes Watch.
type WatchOption func(*watchOptions)

type watchOptions struct {
	from   uint64
	notice func(error)
}

// WatchFrom starts the watch after revision rev (a WatchEvent.Revision
// seen before): the current state is skipped if it is that revision.
func WatchFrom(rev uint64) WatchOption { return func(o *watchOptions) { o.from = rev } }

// WatchRetryNotice has Watch tell f when it subscribes again: f(err) each
// time the watch ended with MustRetry (err says why: the partition moved,
// the connection broke, the node is unreachable) and is about to be
// subscribed again, and f(nil) at the first event after. A partition that
// moves ends a watch once; an outage ends it again and again with no
// event in between, which is what a CLI reports. f runs on Watch's
// goroutine and must not block.
func WatchRetryNotice(f func(err error)) WatchOption {
	return func(o *watchOptions) { o.notice = f }
}

// Bounds of the pause before a watch subscribes again.
const (
	minRewatch = 5 * time.Millisecond
	maxRewatch = time.Second
)

// Watcher is what Watch watches: a *Node, or a transport.Client (a
// *Client's connection to a node with the native service).
type Watcher = transport.Watcher

// Watch is Node.Watch and Client.Watch on any Watcher: it subscribes,
// yields events, and subscribes again from the last revision whenever the
// watch ends with MustRetry (the partition moved, the node shut down, the
// reader fell behind, the connection broke), after a jittered pause of
// 5 ms growing to 1 s, skipping a current state it has already yielded.
func Watch(ctx context.Context, w Watcher, resource string, opts ...WatchOption) iter.Seq2[WatchEvent, error] {
	var o watchOptions
	for _, opt := range opts {
		opt(&o)
	}
	return func(yield func(WatchEvent, error) bool) {
		from := o.from
		var last *WatchEvent
		stopped := errors.New("stopped")
		pause := minRewatch
		retried := false // a notice of a retry went out, and no event since
		for {
			err := w.WatchLock(ctx, resource, from, func(ev WatchEvent) error {
				if retried && o.notice != nil {
					o.notice(nil)
				}
				retried = false
				if ev.Current && last != nil && ev.Revision == last.Revision && ev.Kind == last.Kind && len(ev.Holders) == len(last.Holders) {
					return nil // seen before the watch moved (at one revision, a shared kind's holders only lapse)
				}
				e := ev
				last, from, pause = &e, ev.Revision, minRewatch
				if !yield(ev, nil) {
					return stopped
				}
				return nil
			})
			var we *WatchError
			switch {
			case err == stopped || ctx.Err() != nil:
				return
			case errors.As(err, &we) && we.Status == MustRetry:
				if o.notice != nil {
					o.notice(err)
					retried = true
				}
			default:
				yield(WatchEvent{}, err)
				return
			}
			if backoff.Sleep(ctx, backoff.Jitter(pause)) != nil {
				return
			}
			pause = min(pause*2, maxRewatch)
		}
	}
}
