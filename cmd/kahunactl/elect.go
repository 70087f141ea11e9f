package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/lease"
	"github.com/kahunago/kahuna/transport"
)

// electCommand is `kahunactl elect NAME VALUE [-- CMD]` and
// `kahunactl elect --listen NAME`, in etcdctl's shapes.
var electCommand = command{name: "elect", args: "NAME VALUE [flags] [-- CMD [ARGS...]] | --listen NAME", resource: true,
	summary: "campaign in election NAME with VALUE, print the epoch when elected and lead until interrupted; with -- CMD, run CMD while leader; --listen prints every change of leader",
	flags: func(fs *flag.FlagSet, o *options, d *string) {
		durabilityFlag(fs, d)
		ttlFlag(fs, o, "leadership lease: how long a crashed leader keeps the election (renewed every third of it)")
		durationVar(fs, &o.grace, "grace", 10*time.Second, "with -- CMD: once leadership is lost, how long CMD gets after SIGTERM before SIGKILL")
		fs.BoolVar(&o.listen, "listen", false, "print every change of leader (elected with value and epoch, vacant) until interrupted")
	}}

// elect runs the three forms of elect. ctx is not bounded by --timeout:
// a campaign waits until it is elected or interrupted.
func elect(ctx context.Context, c *transport.Client, name string, o options, argv []string, out printer, stdout, stderr io.Writer) int {
	if o.listen {
		return listen(ctx, c, name, out, stderr)
	}
	what := "elect " + lease.Excerpt(name)
	if argv != nil {
		// As for lock -- CMD: a CMD that cannot run is said before campaigning.
		if _, err := exec.LookPath(argv[0]); err != nil {
			fmt.Fprintf(stderr, "kahunactl: %s: %s; not campaigning\n", what, oneLine(err))
			return cannotRun(err)
		}
	}
	sigs := make(chan os.Signal, 8)
	notifySignals(sigs)
	defer signal.Stop(sigs)

	ld, sig, err := campaignUntilSignal(ctx, c, name, o, sigs, out, stderr)
	if sig != nil {
		if ld != nil {
			resign(ld, o.timeout, stderr)
		}
		fmt.Fprintf(stderr, "kahunactl: %s: interrupted by %s while campaigning\n", what, signalName(sig))
		return 128 + signalNumber(sig)
	}
	if err != nil {
		fmt.Fprintf(stderr, "kahunactl: %s: %s\n", what, out.errorLine(err))
		var se *kahuna.StatusError
		if errors.As(err, &se) && se.Status == kahuna.InvalidInput {
			return exitUsage
		}
		return exitError
	}
	if argv != nil {
		env := []string{
			"KAHUNA_ELECTION_NAME=" + name,
			"KAHUNA_ELECTION_VALUE=" + o.value,
			"KAHUNA_ELECTION_EPOCH=" + strconv.FormatInt(ld.Epoch(), 10),
			"KAHUNA_FENCING_TOKEN=" + strconv.FormatInt(ld.Epoch(), 10)}
		return runUnder(argv, env, ld, "leadership of "+lease.Excerpt(name), func() error {
			return resign(ld, o.timeout, stderr)
		}, o, sigs, stdout, stderr)
	}
	out.print(map[string]any{"election": name, "event": "elected", "value": o.value, "epoch": ld.Epoch()},
		"elected %s value %s epoch %d\n", name, o.value, ld.Epoch())
	select {
	case s := <-sigs:
		if errors.Is(resign(ld, o.timeout, stderr), kahuna.ErrLockLost) {
			return exitLost
		}
		fmt.Fprintf(stderr, "kahunactl: %s: resigned on %s\n", what, signalName(s))
		return exitOK
	case <-ld.Lost():
		fmt.Fprintf(stderr, "kahunactl: leadership of %s lost (%s)\n", lease.Excerpt(name), oneLine(context.Cause(ld.Context())))
		return exitLost
	}
}

// campaignUntilSignal campaigns until elected or a signal (sig is then
// the signal, and ld the leadership if it was won all the same), saying
// when the nodes stop and start answering.
func campaignUntilSignal(ctx context.Context, c *transport.Client, name string, o options, sigs <-chan os.Signal, out printer, stderr io.Writer) (ld *kahuna.Leadership, sig os.Signal, err error) {
	down := &outage{stderr: stderr, what: "elect " + lease.Excerpt(name), out: out, after: 2}
	sig = untilSignal(ctx, sigs, func(ctx context.Context) {
		ld, err = kahuna.Campaign(ctx, c, name, []byte(o.value), kahuna.WithTTL(o.ttl),
			kahuna.WithDurability(o.durability), kahuna.WithRetryNotice(down.notice))
	})
	return ld, sig, err
}

// resign steps down, bounded by timeout, and says so if that failed: the
// lease then ends by itself at its deadline.
func resign(ld *kahuna.Leadership, timeout time.Duration, stderr io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := ld.Resign(ctx)
	switch {
	case errors.Is(err, kahuna.ErrLockLost):
		fmt.Fprintf(stderr, "kahunactl: leadership of %s was lost before the resign\n", lease.Excerpt(ld.Name()))
	case err != nil:
		fmt.Fprintf(stderr, "kahunactl: resign %s: %s (the leadership ends by itself by %s)\n",
			lease.Excerpt(ld.Name()), oneLine(err), ld.Expires().UTC().Format(time.RFC3339))
	}
	return err
}

// listen prints every change of the election's leader, beginning with
// the current one (elected, proclaimed: a new value in the same term,
// vacant), until SIGINT or SIGTERM (exit 0).
func listen(ctx context.Context, w kahuna.Watcher, name string, out printer, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	what := "elect --listen " + lease.Excerpt(name)
	down := &outage{stderr: stderr, what: what, out: out, after: 2}
	for ev, err := range kahuna.Observe(ctx, w, name, kahuna.WatchRetryNotice(down.notice)) {
		if err != nil {
			return watchFailed(stderr, what, err)
		}
		fields := map[string]any{"election": name, "event": ev.Kind.String(), "epoch": ev.Epoch, "revision": ev.Revision}
		switch ev.Kind {
		case kahuna.Elected:
			fields["value"] = string(ev.Value)
			out.print(fields, "%s elected %s epoch %d\n", name, ev.Value, ev.Epoch)
		case kahuna.Proclaimed:
			fields["value"] = string(ev.Value)
			out.print(fields, "%s proclaimed %s epoch %d\n", name, ev.Value, ev.Epoch)
		default:
			if ev.Epoch < 0 {
				out.print(fields, "%s vacant\n", name)
			} else {
				out.print(fields, "%s vacant after epoch %d\n", name, ev.Epoch)
			}
		}
	}
	return exitOK
}

// invalidElection says why elect's NAME or VALUE would be refused, or "":
// kahunactl refuses it as a usage error before any call.
func invalidElection(name string, o options) string {
	if reason := lease.CheckElection(name, []byte(o.value)); reason != "" {
		return reason
	}
	owner := make([]byte, lease.CandidateIDBytes+len(o.value)) // what Campaign will send
	if reason := lease.Check(lease.TryLock, lease.ElectionPrefix+name, owner, o.ttl, o.durability); reason != "" {
		return reason
	}
	if !utf8.ValidString(name) {
		return "election name is not valid UTF-8" // the wire carries it as a string
	}
	return ""
}
