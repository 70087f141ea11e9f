package node

import (
	"context"
	"errors"

	"time"

	"github.com/kahunago/kahuna/actors"
	"github.com/kahunago/kahuna/lease"
	"github.com/kahunago/kahuna/partition"
	"github.com/kahunago/kahuna/transport"
)

// WatchLock is the raw watch that Watch and the native gRPC service's
// Watch stream are built on (transport.Watcher): one subscription, ending
// with a *WatchError MustRetry when the lock's partition moves. On a node
// that does not lead the partition it relays the leader's watch.
func (n *Node) WatchLock(ctx context.Context, resource string, from uint64, send func(transport.WatchEvent) error) error {
	return n.watch(ctx, resource, from, send, false)
}

func (n *Node) watch(ctx context.Context, resource string, from uint64, send func(transport.WatchEvent) error, forwarded bool) error {
	if why := transport.ValidWatch(resource); why != "" {
		return &transport.WatchError{Status: lease.InvalidInput, Reason: why}
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
	moved := func(why string) error { return &transport.WatchError{Status: lease.MustRetry, Reason: why} }
	p := partition.Of(resource, n.cfg.Partitions)
	if _, ok := n.leadership.Serving(p); !ok {
		peer, _, why := n.hop(wctx, p, forwarded)
		if why != "" {
			return moved(why)
		}
		pw, ok := peer.(transport.Watcher)
		if !ok {
			return moved("partition leader cannot be watched")
		}
		err := pw.WatchLock(wctx, resource, from, send)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case n.life.Err() != nil:
			return moved("node closed")
		}
		return err
	}
	w, err := n.ring.Watch(wctx, actors.Request{Request: lease.Request{Resource: resource}, Partition: p}, from)
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
		return &transport.WatchError{Status: lease.MustRetry, Reason: "node closed"}
	case errors.Is(err, actors.ErrTooManyWatchers):
		return &transport.WatchError{Status: lease.Busy, Reason: err.Error()}
	case errors.Is(err, actors.ErrWatchMoved), errors.Is(err, actors.ErrWatchSlow), errors.Is(err, actors.ErrFull):
		return &transport.WatchError{Status: lease.MustRetry, Reason: err.Error()}
	case err == nil:
		return &transport.WatchError{Status: lease.MustRetry, Reason: "watch stopped"}
	}
	return err
}

func eventOf(ev actors.Event) transport.WatchEvent {
	out := transport.WatchEvent{
		Kind:         transport.EventKind(ev.Kind), // the same numbering
		Owner:        ev.Owner,
		FencingToken: ev.Token,
		Revision:     ev.Revision,
		Durability:   ev.Durability,
		Current:      ev.Current,
	}
	if !ev.Expires.IsZero() {
		out.Expires = time.UnixMilli(ev.Expires.UnixMilli())
	}
	for _, h := range ev.Holders { // HoldersOf's copies: the caller's to keep
		h.Expires = time.UnixMilli(h.Expires.UnixMilli()) // wall clock, as over the wire
		out.Holders = append(out.Holders, h)
	}
	return out
}

var _ transport.Watcher = (*Node)(nil)
