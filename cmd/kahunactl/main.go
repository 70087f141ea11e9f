// Command kahunactl locks, extends, unlocks and inspects locks on kahuna
// nodes, and moves partition leadership.
//
//	kahunactl lock jobs/export --ttl 30s            # prints owner and fencing token
//	kahunactl extend jobs/export --owner OWNER --ttl 30s
//	kahunactl unlock jobs/export --owner OWNER
//	kahunactl get jobs/export
//	kahunactl partitions                             # who leads each partition
//	kahunactl transfer-leadership --partition 3 --to 2
//
// Exit codes: 0 success, 1 error, 2 usage, 3 busy, 4 lock lost (not the
// owner, or no such lock).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/transport"
)

const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
	exitBusy  = 3
	exitLost  = 4
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

type options struct {
	endpoints  []string
	ttl        time.Duration
	wait       time.Duration
	durability kahuna.Durability
	owner      string
	format     string
	timeout    time.Duration
	partition  int
	to         uint64
}

const usage = `usage: kahunactl COMMAND [RESOURCE] [flags]

commands:
  lock RESOURCE       acquire; prints the owner and fencing token
  extend RESOURCE     extend the lease (needs --owner)
  unlock RESOURCE     release (needs --owner)
  get RESOURCE        show the live lock
  partitions          show each partition's leader
  transfer-leadership move a partition's leadership (--partition, --to)

common flags (kahunactl COMMAND -h lists them all):
  --endpoints URLS    comma-separated node URLs (default http://127.0.0.1:2070)
  --durability D      persistent (default) or ephemeral
  --owner OWNER       the owner lock printed (extend, unlock)
  --ttl D, --wait D   lease length and how long lock waits while busy
  --format F          text (default) or json

exit codes: 0 success, 1 error, 2 usage, 3 busy, 4 lock lost (not the
owner, or no such lock)
`

// commands are kahunactl's commands and whether each takes a RESOURCE.
var commands = map[string]bool{
	"lock": true, "extend": true, "unlock": true, "get": true,
	"partitions": false, "transfer-leadership": false,
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	cmd, args := args[0], args[1:]
	needsResource, known := commands[cmd]
	if !known {
		fmt.Fprintf(stderr, "kahunactl: unknown command %q\n%s", cmd, usage)
		return exitUsage
	}
	fs := flag.NewFlagSet("kahunactl "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	var endpoints, durability string
	fs.StringVar(&endpoints, "endpoints", "http://127.0.0.1:2070", "comma-separated node URLs (http:// = h2c, https:// = TLS)")
	fs.DurationVar(&o.ttl, "ttl", 30*time.Second, "lease length for lock and extend")
	fs.DurationVar(&o.wait, "wait", 0, "for lock: keep trying this long while the lock is busy")
	fs.StringVar(&durability, "durability", "persistent", "persistent or ephemeral")
	fs.StringVar(&o.owner, "owner", "", "owner (lock: default a fresh random one; extend/unlock: required)")
	fs.StringVar(&o.format, "format", "text", "text or json")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Second, "give up after this long")
	fs.IntVar(&o.partition, "partition", -1, "for transfer-leadership: the partition")
	fs.Uint64Var(&o.to, "to", 0, "for transfer-leadership: the node to lead it")
	// The RESOURCE may come before, after or between the flags: the flag
	// package stops at the first non-flag argument, so take it and go on.
	var (
		resource     string
		haveResource bool
		extra        []string
	)
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return exitOK
			}
			return exitUsage
		}
		if fs.NArg() == 0 {
			break
		}
		if needsResource && !haveResource {
			resource, haveResource = fs.Arg(0), true
		} else {
			extra = append(extra, fs.Arg(0))
		}
		args = fs.Args()[1:]
	}
	if len(extra) > 0 {
		if !needsResource {
			fmt.Fprintf(stderr, "kahunactl: %s takes no RESOURCE (got %q)\n", cmd, extra[0])
		} else {
			fmt.Fprintf(stderr, "kahunactl: unexpected argument %q\n", extra[0])
		}
		return exitUsage
	}
	switch durability {
	case "persistent":
		o.durability = kahuna.Persistent
	case "ephemeral":
		o.durability = kahuna.Ephemeral
	default:
		fmt.Fprintf(stderr, "kahunactl: --durability must be persistent or ephemeral, not %q\n", durability)
		return exitUsage
	}
	if o.format != "text" && o.format != "json" {
		fmt.Fprintf(stderr, "kahunactl: --format must be text or json, not %q\n", o.format)
		return exitUsage
	}
	for _, e := range strings.Split(endpoints, ",") {
		if e = strings.TrimSpace(e); e != "" {
			o.endpoints = append(o.endpoints, e)
		}
	}
	switch {
	case needsResource && resource == "":
		fmt.Fprintf(stderr, "kahunactl: %s needs a RESOURCE\n", cmd)
		return exitUsage
	case (cmd == "extend" || cmd == "unlock") && o.owner == "":
		fmt.Fprintf(stderr, "kahunactl: %s needs --owner (the one lock printed)\n", cmd)
		return exitUsage
	case (cmd == "lock" || cmd == "extend") && o.ttl <= 0:
		fmt.Fprintf(stderr, "kahunactl: --ttl must be positive, not %v\n", o.ttl)
		return exitUsage
	case o.wait < 0:
		fmt.Fprintf(stderr, "kahunactl: --wait must not be negative, not %v\n", o.wait)
		return exitUsage
	case o.timeout <= 0:
		fmt.Fprintf(stderr, "kahunactl: --timeout must be positive, not %v\n", o.timeout)
		return exitUsage
	case len(o.endpoints) == 0:
		fmt.Fprintln(stderr, "kahunactl: --endpoints is empty")
		return exitUsage
	}
	for _, e := range o.endpoints {
		if u, err := url.Parse(e); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			fmt.Fprintf(stderr, "kahunactl: --endpoints: %q is not an http:// or https:// URL\n", e)
			return exitUsage
		}
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	out := printer{w: stdout, json: o.format == "json"}
	switch cmd {
	case "partitions":
		return partitions(ctx, o, out, stderr)
	case "transfer-leadership":
		return transferLeadership(ctx, o, out, stderr)
	}
	client, err := transport.Dial(ctx, o.endpoints)
	if err != nil {
		fmt.Fprintf(stderr, "kahunactl: %s\n", oneLine(err))
		return exitError
	}
	defer client.Close()
	switch cmd {
	case "lock":
		return lock(ctx, client, resource, o, out, stderr)
	case "extend":
		r, err := client.Extend(ctx, resource, []byte(o.owner), o.ttl, o.durability)
		return report(out, stderr, "extend", resource, o.owner, r, err, kahuna.Extended)
	case "unlock":
		r, err := client.Unlock(ctx, resource, []byte(o.owner), o.durability)
		return report(out, stderr, "unlock", resource, o.owner, r, err, kahuna.Unlocked)
	default:
		info, r, err := client.Get(ctx, resource, o.durability)
		if err == nil && r.Status == kahuna.Got {
			out.print(map[string]any{"resource": resource, "status": r.Status.String(), "owner": string(info.Owner),
				"fencingToken": info.FencingToken, "expires": info.Expires.UTC().Format(time.RFC3339Nano)},
				"%s owned by %s, fencing token %d, expires %s\n", resource, info.Owner, info.FencingToken, info.Expires.UTC().Format(time.RFC3339Nano))
			return exitOK
		}
		return report(out, stderr, "get", resource, "", r, err, kahuna.Got)
	}
}

// oneLine folds a (possibly joined, multi-line) error into one line,
// dropping a line already said: a client with several streams per
// endpoint reports the same dial failure once per stream.
func oneLine(err error) string {
	var parts []string
next:
	for _, l := range strings.Split(err.Error(), "\n") {
		if l = strings.TrimSpace(l); l == "" {
			continue
		}
		for _, p := range parts {
			if strings.Contains(p, l) {
				continue next
			}
		}
		parts = append(parts, l)
	}
	return strings.Join(parts, "; ")
}

func lock(ctx context.Context, l kahuna.Locker, resource string, o options, out printer, stderr io.Writer) int {
	opts := []kahuna.AcquireOption{kahuna.WithTTL(o.ttl), kahuna.WithWait(o.wait), kahuna.WithDurability(o.durability)}
	if o.owner != "" {
		opts = append(opts, kahuna.WithOwner([]byte(o.owner)))
	}
	h, err := kahuna.Acquire(ctx, l, resource, opts...)
	if err != nil {
		var se *kahuna.StatusError
		if errors.As(err, &se) {
			return report(out, stderr, "lock", resource, o.owner, kahuna.Result{Status: se.Status}, nil, kahuna.Locked)
		}
		return report(out, stderr, "lock", resource, o.owner, kahuna.Result{}, err, kahuna.Locked)
	}
	out.print(map[string]any{"resource": resource, "status": "Locked", "owner": string(h.Owner()), "fencingToken": h.FencingToken()},
		"locked %s owner %s fencing token %d\n", resource, h.Owner(), h.FencingToken())
	return exitOK
}

// report prints the outcome of a call and picks the exit code.
func report(out printer, stderr io.Writer, op, resource, owner string, r kahuna.Result, err error, success kahuna.Status) int {
	if err != nil {
		fmt.Fprintf(stderr, "kahunactl: %s %s: %s\n", op, resource, oneLine(err))
		return exitError
	}
	fields := map[string]any{"resource": resource, "status": r.Status.String(), "fencingToken": r.FencingToken}
	if owner != "" {
		fields["owner"] = owner
	}
	switch r.Status {
	case success:
		out.print(fields, "%s %s: %s, fencing token %d\n", op, resource, r.Status, r.FencingToken)
		return exitOK
	case kahuna.Busy:
		out.print(fields, "%s %s: busy (held by another owner)\n", op, resource)
		return exitBusy
	case kahuna.LockDoesNotExist, kahuna.InvalidOwner:
		out.print(fields, "%s %s: %s\n", op, resource, r.Status)
		return exitLost
	}
	out.print(fields, "%s %s: %s\n", op, resource, r.Status)
	return exitError
}

type printer struct {
	w    io.Writer
	json bool
}

func (p printer) print(fields map[string]any, format string, args ...any) {
	if p.json {
		_ = json.NewEncoder(p.w).Encode(fields)
		return
	}
	fmt.Fprintf(p.w, format, args...)
}
