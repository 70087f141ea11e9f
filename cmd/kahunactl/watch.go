package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/lease"
	"github.com/kahunago/kahuna/transport"
)

// watchCommand is `kahunactl watch RESOURCE`: one line per change of the
// lock, as it happens, until interrupted.
var watchCommand = command{name: "watch", args: "RESOURCE [flags]", resource: true,
	summary: "print the changes of RESOURCE's lock as they happen (acquired, extended, released, expired) until interrupted",
	flags: func(_ *flag.FlagSet, _ *options, d *string) {
		*d = "persistent" // one name is one lock: a watch sees either kind
	}}

// watch prints every event of resource's watch, beginning with its
// current state, until SIGINT or SIGTERM (exit 0). A node without the
// native service, or bad input, ends it with an error.
func watch(ctx context.Context, w kahuna.Watcher, resource string, out printer, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	down := &outage{stderr: stderr, what: "watch " + lease.Excerpt(resource), out: out, after: 2}
	for ev, err := range kahuna.Watch(ctx, w, resource, kahuna.WatchRetryNotice(down.notice)) {
		if err != nil {
			return watchFailed(stderr, "watch "+lease.Excerpt(resource), err)
		}
		printEvent(out, resource, ev)
	}
	return exitOK
}

// watchFailed says why a watch (of what) ended, and is its exit code.
func watchFailed(stderr io.Writer, what string, err error) int {
	if errors.Is(err, transport.ErrNoNative) {
		fmt.Fprintf(stderr, "kahunactl: %s: the node does not offer watches (a plain Kahuna server)\n", what)
	} else {
		fmt.Fprintf(stderr, "kahunactl: %s: %s\n", what, oneLine(err))
	}
	return exitError
}

func printEvent(out printer, resource string, ev kahuna.WatchEvent) {
	fields := map[string]any{"resource": resource, "event": ev.Kind.String(), "revision": ev.Revision,
		"fencingToken": ev.FencingToken, "durability": ev.Durability.String(), "current": ev.Current, "servedFrom": ev.ServedFrom}
	state := ""
	if ev.Current {
		state = " (current)"
	}
	if lease.IsSemaphore(resource) || lease.IsRWLock(resource) {
		// Several holders: what happened, then the holders left, a row each.
		fields["holders"] = holdersJSON(ev.Holders)
		out.print(fields, "%s %s%s, %d held, fencing token %d, revision %d\n", resource, ev.Kind, state, len(ev.Holders), ev.FencingToken, ev.Revision)
		if !out.json {
			tw := tabwriter.NewWriter(out.w, 0, 4, 2, ' ', 0)
			holderRows(tw, resource, ev.Holders, "")
			tw.Flush()
		}
		return
	}
	switch ev.Kind {
	case kahuna.EventReleased:
		out.print(fields, "%s released%s, revision %d\n", resource, state, ev.Revision)
		return
	}
	expires := ev.Expires.UTC().Format(time.RFC3339Nano)
	fields["owner"], fields["expires"] = string(ev.Owner), expires
	verb := map[kahuna.EventKind]string{kahuna.EventAcquired: "acquired by", kahuna.EventExtended: "extended by", kahuna.EventExpired: "expired, was held by"}[ev.Kind]
	out.print(fields, "%s %s %s%s, fencing token %d, expires %s, revision %d, %s\n",
		resource, verb, ev.Owner, state, ev.FencingToken, expires, ev.Revision, ev.Durability)
}
