package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/lease"
	"github.com/kahunago/kahuna/transport"
)

// semaphoreCommand is `kahunactl semaphore NAME --limit N [-- CMD]`: take
// permits of a semaphore, and with CMD hold them while it runs.
var semaphoreCommand = command{name: "semaphore", args: "NAME --limit N [-n K] [flags] [-- CMD [ARGS...]] | NAME --set-limit N", resource: true,
	summary: "take K permits of semaphore NAME (of N) and print their slots and fencing tokens; with -- CMD, hold them while CMD runs; --set-limit resizes it",
	flags: func(fs *flag.FlagSet, o *options, d *string) {
		*d = "persistent" // a semaphore is persistent: no --durability
		fs.IntVar(&o.semLimit, "limit", 0, "the semaphore's limit, 1 to 256 (required: the nodes refuse one that differs from the limit they hold)")
		fs.IntVar(&o.permits, "n", 1, "permits to take")
		fs.IntVar(&o.setLimit, "set-limit", 0, "set the semaphore's limit to this, online (1 to 256): growing lets waiters in, shrinking revokes no permit; takes none")
		ttlFlag(fs, o, "lease length of the permits (with -- CMD: extended every third of it while CMD runs)")
		durationVar(fs, &o.wait, "wait", 0, "wait this long for the permits, first come first served (default: try once; with -- CMD: wait until interrupted)")
		fs.StringVar(&o.owner, "owner", "", "owner to take them as (default a fresh random one)")
		durationVar(fs, &o.grace, "grace", 10*time.Second, "with -- CMD: once the permits are lost, how long CMD gets after SIGTERM before SIGKILL")
	}}

// semaphore takes the permits and prints them, or runs argv while it
// holds them. ctx is not bounded by --timeout: with CMD and no --wait,
// the wait lasts until the permits come or a signal.
func semaphore(ctx context.Context, c *transport.Client, name string, o options, argv []string, out printer, stdout, stderr io.Writer) int {
	what := "semaphore " + lease.Excerpt(name)
	if o.setLimitGiven {
		return setLimit(ctx, c, name, o, argv, out, stderr)
	}
	// Bad input is said before anything is sent, by the nodes' own rule.
	if _, why := (lease.Request{Op: lease.TryLock, Resource: kahuna.SemaphorePrefix + name, Owner: []byte("o"), TTL: o.ttl,
		Durability: lease.Persistent, Permits: o.permits, Limit: o.semLimit}).Check(); why != "" {
		fmt.Fprintf(stderr, "kahunactl: %s: %s\n", what, why)
		return exitUsage
	}
	if argv != nil {
		if _, err := exec.LookPath(argv[0]); err != nil {
			fmt.Fprintf(stderr, "kahunactl: %s: %s; no permit taken\n", what, oneLine(err))
			return cannotRun(err)
		}
	}
	sigs := make(chan os.Signal, 8)
	notifySignals(sigs)
	defer signal.Stop(sigs)

	sem := kahuna.NewSemaphore(c, name, o.semLimit)
	down := &outage{stderr: stderr, what: what, out: out, after: 2}
	opts := append(acquireOptions(o), kahuna.WithRetryNotice(down.notice))
	var (
		p   *kahuna.Permit
		err error
	)
	sig := untilSignal(ctx, sigs, func(ctx context.Context) {
		if argv != nil && !o.waitGiven {
			p, err = sem.Acquire(ctx, o.permits, opts...) // until interrupted
			return
		}
		ctx, cancel := context.WithTimeout(ctx, o.timeout+o.wait)
		defer cancel()
		p, err = sem.Acquire(ctx, o.permits, append(opts, kahuna.WithWait(o.wait))...)
	})
	if sig != nil {
		if p != nil {
			release(p.Lock, o.timeout, stderr)
		}
		fmt.Fprintf(stderr, "kahunactl: %s: interrupted by %s while waiting; no permit kept\n", what, signalName(sig))
		return 128 + signalNumber(sig)
	}
	if err != nil {
		var se *kahuna.StatusError
		if errors.As(err, &se) {
			return report(out, stderr, "semaphore", name, o.owner, kahuna.Result{Status: se.Status, Reason: se.Reason}, nil, kahuna.Locked)
		}
		return report(out, stderr, "semaphore", name, o.owner, kahuna.Result{}, err, kahuna.Locked)
	}
	grants := p.Grants()
	slots, tokens := make([]string, len(grants)), map[string]int64{}
	var permits []map[string]any
	for i, g := range grants {
		slots[i] = strconv.Itoa(g.Slot)
		tokens[slots[i]] = g.Token
		permits = append(permits, map[string]any{"slot": g.Slot, "fencingToken": g.Token})
	}
	if argv == nil {
		out.print(map[string]any{"semaphore": name, "owner": string(p.Owner()), "permits": permits, "permitsFree": p.Free(), "expires": p.Expires().UTC().Format(time.RFC3339Nano)},
			"semaphore %s: %d of %d permits, owner %s, slots %s, fencing tokens %s, %d left free\n", name, len(grants), o.semLimit, p.Owner(),
			strings.Join(slots, ","), joinTokens(grants), p.Free())
		return exitOK
	}
	alive, stopAlive := context.WithCancel(context.Background())
	defer stopAlive()
	p.KeepAlive(alive, 0)
	tokenJSON, _ := json.Marshal(tokens)
	env := []string{
		"KAHUNA_SEMAPHORE_NAME=" + name,
		"KAHUNA_SEMAPHORE_SLOT=" + slots[0],
		"KAHUNA_SEMAPHORE_SLOTS=" + strings.Join(slots, ","),
		"KAHUNA_FENCING_TOKEN=" + strconv.FormatInt(grants[0].Token, 10),
		"KAHUNA_FENCING_TOKENS=" + string(tokenJSON),
		"KAHUNA_LOCK_OWNER=" + string(p.Owner())}
	return runUnder(argv, env, p, what, func() error {
		stopAlive()
		return release(p.Lock, o.timeout, stderr)
	}, o, sigs, stdout, stderr)
}

// setLimit is semaphore NAME --set-limit N.
func setLimit(ctx context.Context, c *transport.Client, name string, o options, argv []string, out printer, stderr io.Writer) int {
	what := "semaphore " + lease.Excerpt(name)
	if argv != nil {
		fmt.Fprintf(stderr, "kahunactl: %s: --set-limit runs no CMD\n", what)
		return exitUsage
	}
	if _, why := (lease.Request{Op: lease.TryLock, Resource: kahuna.SemaphorePrefix + name, Owner: []byte("o"), TTL: time.Second,
		Durability: lease.Persistent, Limit: o.setLimit, Resize: true}).Check(); why != "" {
		fmt.Fprintf(stderr, "kahunactl: %s: %s\n", what, why)
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	if err := kahuna.NewSemaphore(c, name, o.setLimit).SetLimit(ctx, o.setLimit); err != nil {
		var se *kahuna.StatusError
		if errors.As(err, &se) {
			return report(out, stderr, "semaphore", name, o.owner, kahuna.Result{Status: se.Status, Reason: se.Reason}, nil, kahuna.Extended)
		}
		return report(out, stderr, "semaphore", name, o.owner, kahuna.Result{}, err, kahuna.Extended)
	}
	out.print(map[string]any{"semaphore": name, "limit": o.setLimit}, "semaphore %s: limit set to %d\n", name, o.setLimit)
	return exitOK
}

func joinTokens(grants []kahuna.Grant) string {
	s := make([]string, len(grants))
	for i, g := range grants {
		s[i] = strconv.FormatInt(g.Token, 10)
	}
	return strings.Join(s, ",")
}
