package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kahunago/kahuna/lease"
	"github.com/kahunago/kahuna/transport"
)

// locksCommand is kahunactl locks: a page of the live locks by prefix,
// as etcdctl get --prefix lists keys.
var locksCommand = command{name: "locks", args: "[PREFIX] [--limit N] [--after NAME] [flags]", resource: true, prefix: true,
	summary: "list the live locks whose name starts with PREFIX (none: every lock), in name order, a page at a time: owner, fencing token, durability, expiry",
	flags: func(fs *flag.FlagSet, o *options, _ *string) {
		fs.IntVar(&o.limit, "limit", lease.DefaultListLimit, fmt.Sprintf("locks per page, 1 to %d", lease.MaxListLimit))
		fs.StringVar(&o.after, "after", "", "list the names after this one: the next page's cursor, as the last page printed it")
	}}

// lockJSON is one lock of locks' JSON output.
type lockJSON struct {
	Resource     string `json:"resource"`
	Owner        string `json:"owner"`
	FencingToken int64  `json:"fencingToken"`
	Durability   string `json:"durability"`
	Expires      string `json:"expires"` // RFC 3339, UTC
	// Holders, for a semaphore or a read/write lock: each live holder.
	Holders []holderJSON `json:"holders,omitempty"`
}

type holderJSON struct {
	Slot         int    `json:"slot"`
	Owner        string `json:"owner"`
	FencingToken int64  `json:"fencingToken"`
	Expires      string `json:"expires"`
}

// holdersJSON is hs in the JSON output (nil for none).
func holdersJSON(hs []lease.Holder) []holderJSON {
	var out []holderJSON
	for _, h := range hs {
		out = append(out, holderJSON{Slot: h.Slot, Owner: string(h.Owner), FencingToken: h.FencingToken, Expires: h.Expires.UTC().Format(time.RFC3339Nano)})
	}
	return out
}

// holderRows writes a row per holder of resource to tw: where (a
// semaphore's slot), owner, token, gap, expiry.
func holderRows(tw io.Writer, resource string, hs []lease.Holder, gap string) {
	for _, h := range hs {
		where := "  holder"
		if strings.HasPrefix(resource, lease.SemaphorePrefix) {
			where = fmt.Sprintf("  slot %d", h.Slot)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s%s\n", where, lease.Excerpt(string(h.Owner)), h.FencingToken, gap, h.Expires.UTC().Format(time.RFC3339Nano))
	}
}

// getShared is get of a semaphore or a read/write lock: its holders, one
// row each. It asks over REST, on the same endpoints: Kahuna's GetLock,
// which the gRPC client speaks, has no room for several holders.
func getShared(ctx context.Context, resource string, o options, cc conn, out printer, stderr io.Writer) int {
	c, err := transport.DialREST(o.endpoints, cc.clientOptions()...)
	if err != nil {
		fmt.Fprintf(stderr, "kahunactl: get: %s\n", oneLine(err))
		return exitUsage
	}
	defer c.Close()
	info, r, err := c.Get(ctx, resource, o.durability)
	if err != nil || r.Status != lease.Got {
		return report(out, stderr, "get", resource, "", r, err, lease.Got)
	}
	expires := info.Expires.UTC().Format(time.RFC3339Nano)
	if out.json {
		_ = json.NewEncoder(out.w).Encode(map[string]any{"resource": resource, "status": lease.Got.String(),
			"fencingToken": info.FencingToken, "expires": expires, "holders": holdersJSON(info.Holders)})
		return exitOK
	}
	fmt.Fprintf(out.w, "%s held by %d, fencing token %d, the last until %s\n", lease.Excerpt(resource), len(info.Holders), info.FencingToken, expires)
	tw := tabwriter.NewWriter(out.w, 0, 4, 2, ' ', 0)
	holderRows(tw, resource, info.Holders, "")
	tw.Flush()
	return exitOK
}

// locks prints one page of the live locks under prefix: a table (the
// cursor of the next page after it, when there is one) or JSON.
func locks(ctx context.Context, prefix string, o options, cc conn, out printer, stderr io.Writer) int {
	if o.limit == 0 {
		fmt.Fprintf(stderr, "kahunactl: locks: --limit must be 1 to %d, not 0\n", lease.MaxListLimit)
		return exitUsage
	}
	c, err := transport.DialREST(o.endpoints, cc.clientOptions()...)
	if err != nil {
		fmt.Fprintf(stderr, "kahunactl: locks: %s\n", oneLine(err))
		return exitUsage
	}
	defer c.Close()
	page, err := c.List(ctx, lease.ListRequest{Prefix: prefix, After: o.after, Limit: o.limit})
	var le *lease.ListError
	switch {
	case errors.As(err, &le) && le.Status == lease.InvalidInput:
		fmt.Fprintf(stderr, "kahunactl: locks %s: invalid input: %s\n", lease.Excerpt(prefix), le.Reason)
		return exitUsage
	case errors.As(err, &le):
		fmt.Fprintf(stderr, "kahunactl: locks %s: %s: %s\n", lease.Excerpt(prefix), le.Status.Describe(), le.Reason)
		return exitError
	case err != nil:
		fmt.Fprintf(stderr, "kahunactl: locks %s: %s\n", lease.Excerpt(prefix), out.errorLine(err))
		return exitError
	}
	rfc3339 := func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
	expires := func(l lease.ListedLock) string { return rfc3339(l.Expires) }
	if out.json {
		v := struct {
			Locks []lockJSON `json:"locks"`
			Next  string     `json:"next,omitempty"`
		}{Locks: []lockJSON{}, Next: page.Next}
		for _, l := range page.Locks {
			j := lockJSON{Resource: l.Resource, Owner: string(l.Owner), FencingToken: l.FencingToken,
				Durability: l.Durability.String(), Expires: expires(l)}
			j.Holders = holdersJSON(l.Holders)
			v.Locks = append(v.Locks, j)
		}
		_ = json.NewEncoder(out.w).Encode(v)
		return exitOK
	}
	tw := tabwriter.NewWriter(out.w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "RESOURCE\tOWNER\tFENCING TOKEN\tDURABILITY\tEXPIRES\n")
	for _, l := range page.Locks {
		owner := lease.Excerpt(string(l.Owner))
		if len(l.Holders) > 0 {
			owner = fmt.Sprintf("(%d holders)", len(l.Holders))
			if len(l.Holders) == 1 {
				owner = "(1 holder)"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", lease.Excerpt(l.Resource), owner, l.FencingToken, l.Durability, expires(l))
		holderRows(tw, l.Resource, l.Holders, "\t")
	}
	tw.Flush()
	if page.Next != "" {
		fmt.Fprintf(out.w, "more after %s: kahunactl locks %q --after %q\n", lease.Excerpt(page.Next), prefix, page.Next)
	}
	return exitOK
}
