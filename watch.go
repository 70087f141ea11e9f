package kahuna

import (
	"context"
	"errors"
	"iter"
	"time"

	"github.com/kahunago/kahuna/actors"
	"github.com/kahunago/kahuna/partition"
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

type watchOptions struct{ from uint64 }

// WatchFrom starts the watch after revision rev (a WatchEvent.Revision
// seen before): the current state is skipped if it is that revision.
func WatchFrom(rev uint64) WatchOption { return func(o *watchOptions) { o.from = rev } }

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
		backoff := minRewatch
		for {
			err := w.WatchLock(ctx, resource, from, func(ev WatchEvent) error {
				if ev.Current && last != nil && ev.Revision == last.Revision && ev.Kind == last.Kind {
					return nil // seen before the watch moved
				}
				e := ev
				last, from, backoff = &e, ev.Revision, minRewatch
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
			default:
				yield(WatchEvent{}, err)
				return
			}
			if sleep(ctx, jitter(backoff)) != nil {
				return
			}
			backoff = min(backoff*2, maxRewatch)
		}
	}
}

// Watch streams the changes of the lock on resource, as they happen,
// beginning with its current state (an event with Current set): acquired,
// extended, released, expired (noticed when the lease ends, without any
// request), each with the lock's revision. It runs until ctx ends or the
// loop stops; it yields an error, and ends, only for what watching again
// cannot mend (an invalid name, too many watchers, the node closed).
// Watchers are the partition leader's memory: when the partition moves,
// Watch subscribes again where it is served now, from the last revision
// it yielded (events in between may be folded into the new current
// state).
//
//	for ev, err := range node.Watch(ctx, "jobs/export") {
//		if err != nil {
//			return err
//		}
//		fmt.Println(ev.Kind, string(ev.Owner), ev.FencingToken)
//	}
func (n *Node) Watch(ctx context.Context, resource string, opts ...WatchOption) iter.Seq2[WatchEvent, error] {
	return Watch(ctx, n, resource, opts...)
}

// WatchLock is the raw watch that Watch and the native gRPC service's
// Watch stream are built on (transport.Watcher): one subscription, ending
// with a *WatchError MustRetry when the lock's partition moves. On a node
// that does not lead the partition it relays the leader's watch.
func (n *Node) WatchLock(ctx context.Context, resource string, from uint64, send func(WatchEvent) error) error {
	return n.watch(ctx, resource, from, send, false)
}

func (n *Node) watch(ctx context.Context, resource string, from uint64, send func(WatchEvent) error, forwarded bool) error {
	if why := transport.ValidWatch(resource); why != "" {
		return &WatchError{Status: InvalidInput, Reason: why}
	}
	if err := n.waitUnpaused(ctx); err != nil {
		return err
	}
	if !n.enter() {
		return errClosedNotApplied
	}
	defer n.exit()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(n.life, cancel)()
	moved := func(why string) error { return &WatchError{Status: MustRetry, Reason: why} }
	p := partition.Of(resource, n.cfg.Partitions)
	if _, ok := n.leadership.Serving(p); !ok {
		if forwarded {
			return moved("not the partition leader")
		}
		leader, self := n.leadership.LeaderOf(p)
		if leader == 0 || self {
			return moved("no partition leader yet")
		}
		peer, err := n.peers.get(wctx, leader)
		if err != nil {
			return moved("partition leader not reachable")
		}
		pw, ok := peer.(transport.Watcher)
		if !ok {
			return moved("partition leader cannot be watched")
		}
		err = pw.WatchLock(wctx, resource, from, send)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case n.life.Err() != nil:
			return moved("node closed")
		}
		return err
	}
	w, err := n.ring.Watch(wctx, actors.Request{Resource: resource, Partition: p}, from)
	if err != nil {
		return n.watchEnd(ctx, err)
	}
	defer w.Stop()
	for {
		select {
		case ev, ok := <-w.C:
			if !ok {
				return n.watchEnd(ctx, w.Err())
			}
			if err := send(eventOf(ev)); err != nil {
				return err
			}
		case <-wctx.Done():
			return n.watchEnd(ctx, nil)
		}
	}
}

// watchEnd is what ends a node's watch whose actor watch ended with err.
func (n *Node) watchEnd(ctx context.Context, err error) error {
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case n.life.Err() != nil, errors.Is(err, actors.ErrClosed):
		return &WatchError{Status: MustRetry, Reason: "node closed"}
	case errors.Is(err, actors.ErrTooManyWatchers):
		return &WatchError{Status: Busy, Reason: err.Error()}
	case errors.Is(err, actors.ErrWatchMoved), errors.Is(err, actors.ErrWatchSlow), errors.Is(err, actors.ErrFull):
		return &WatchError{Status: MustRetry, Reason: err.Error()}
	case err == nil:
		return &WatchError{Status: MustRetry, Reason: "watch stopped"}
	}
	return err
}

func eventOf(ev actors.Event) WatchEvent {
	out := WatchEvent{
		Kind:         EventKind(ev.Kind), // the same numbering
		Owner:        ev.Owner,
		FencingToken: ev.Token,
		Revision:     ev.Revision,
		Durability:   ev.Durability,
		Current:      ev.Current,
	}
	if !ev.Expires.IsZero() {
		out.Expires = time.UnixMilli(ev.Expires.UnixMilli())
	}
	return out
}

var _ transport.Watcher = (*Node)(nil)
