package main

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
)

// TestElectLeadsUntilInterrupted: elect NAME VALUE prints the epoch once
// elected and leads until SIGINT, which resigns (exit 0); get shows the
// leader as the lock election:NAME; the next candidate, elect -- CMD, is
// elected at once with the next epoch, which CMD sees; elect --listen
// prints the leader and every change.
func TestElectLeadsUntilInterrupted(t *testing.T) {
	_, ep := startNode(t)
	ready := subscribed(t)
	a := start("elect", "sched", "node-a", "--endpoints", ep)
	await(t, ready, 30*time.Second, "the signal subscription", a)
	await(t, a.stdout.seen("elected sched value node-a epoch 0\n"), 30*time.Second, "a's election", a)
	r := ctl(t, "get", "election:sched", "--endpoints", ep).want(t, exitOK, "get while a leads")
	if !strings.Contains(r.stdout, "node-a, fencing token 0") {
		t.Fatalf("get while a leads: %s", r)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	r = a.result(t, 30*time.Second).want(t, exitOK, "a after SIGINT")
	oneStderrLine(t, r, "elect sched: resigned on SIGINT")
	ctl(t, "get", "election:sched", "--endpoints", ep).want(t, exitLost, "get after a resigned")

	// b leads while its CMD runs (until the gate file appears), watched.
	gate := t.TempDir() + "/go-on"
	b := start("elect", "sched", "node-b", "--endpoints", ep, "--", "sh", "-c",
		`echo "$KAHUNA_ELECTION_NAME|$KAHUNA_ELECTION_VALUE|$KAHUNA_ELECTION_EPOCH|$KAHUNA_FENCING_TOKEN"; while [ ! -e "$1" ]; do sleep 0.02; done`, "sh", gate)
	await(t, b.stdout.seen("sched|node-b|1|1\n"), 30*time.Second, "b's CMD", b)
	l := start("elect", "--listen", "sched", "--format", "json", "--endpoints", ep)
	await(t, l.stdout.seen(`"value":"node-b"`), 30*time.Second, "the listener's current leader", l)
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	r = b.result(t, 30*time.Second).want(t, exitOK, "b's CMD")
	if r.stderr != "" {
		t.Fatalf("b: %s", r)
	}
	await(t, l.stdout.seen(`"event":"vacant"`), 30*time.Second, "the listener's vacancy", l)
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil { // the listener's own subscription takes it
		t.Fatal(err)
	}
	r = l.result(t, 30*time.Second).want(t, exitOK, "listener after SIGTERM")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"epoch":1`) || !strings.Contains(lines[0], `"event":"elected"`) ||
		!strings.Contains(lines[1], `"epoch":1`) || !strings.Contains(lines[1], `"event":"vacant"`) {
		t.Fatalf("listener printed %q, want b elected at epoch 1, then vacant after it", r.stdout)
	}
}

// TestElectRunLost: a leader whose node goes away loses the leadership:
// CMD gets SIGTERM and kahunactl exits 4.
func TestElectRunLost(t *testing.T) {
	n, ep := startNode(t)
	s := start("elect", "sched", "a", "--ttl", "1s", "--grace", "300ms", "--timeout", "2s", "--endpoints", ep, "--", "sh", "-c",
		`trap 'echo term; exit 0' TERM; echo ready; while :; do sleep 0.02; done`)
	await(t, s.stdout.seen("ready\n"), 30*time.Second, "CMD's ready", s)
	closed := make(chan error, 1)
	go func() { closed <- n.Close() }()
	r := s.result(t, 30*time.Second).want(t, exitLost, "leadership lost")
	if r.stdout != "ready\nterm\n" {
		t.Fatalf("CMD output %q (%s)", r.stdout, r)
	}
	oneStderrLine(t, r, "leadership of sched lost (kahuna: lock lost")
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
}

// TestElectUsage: malformed elect commands are usage errors said in one
// line, with no call made.
func TestElectUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"elect"}, "elect needs a NAME"},
		{[]string{"elect", "sched"}, "elect needs a NAME and a VALUE (or --listen NAME)"},
		{[]string{"elect", "--listen", "sched", "v"}, `elect --listen NAME takes no VALUE`},
		{[]string{"elect", "sched", "v", "w"}, `unexpected argument "w"`},
		{[]string{"elect", "sched", "v", "--"}, "no CMD to run after --"},
		{[]string{"elect", "sched", strings.Repeat("v", 993)}, "value is 993 bytes, over the limit of 992"},
		{[]string{"elect", strings.Repeat("n", 1016), "v"}, "election name is 1016 bytes, over the limit of 1015"},
		{[]string{"elect", "sched", "v", "--ttl", "0s"}, "--ttl must be positive"},
		{[]string{"elect", "sched", "v", "--ttl", "600h"}, "over the limit"},
	} {
		args := append([]string{"elect", "--endpoints", closedEndpoint(t)}, c.args[1:]...)
		r := ctl(t, args...).want(t, exitUsage, strings.Join(c.args, " "))
		oneStderrLine(t, r, c.says)
	}
	// A CMD that is not there: 127, and no campaign.
	_, ep := startNode(t)
	r := ctl(t, "elect", "sched", "v", "--endpoints", ep, "--", "kahuna-no-such-command-here").want(t, exitNotFound, "missing CMD")
	oneStderrLine(t, r, "not campaigning")
	ctl(t, "get", "election:sched", "--endpoints", ep).want(t, exitLost, "get after a CMD that could not run")
}

// TestElectListenProclaimed: elect --listen prints a leader's new value
// in its term as proclaimed, with the same epoch.
func TestElectListenProclaimed(t *testing.T) {
	n, ep := startNode(t)
	ctx := context.Background()
	ld, err := kahuna.Campaign(ctx, n, "sched", []byte("host-a:1"))
	if err != nil {
		t.Fatal(err)
	}
	defer ld.Resign(ctx)
	l := start("elect", "--listen", "sched", "--endpoints", ep)
	await(t, l.stdout.seen("sched elected host-a:1 epoch 0\n"), 30*time.Second, "the listener's current leader", l)
	if err := ld.Proclaim(ctx, []byte("host-a:2")); err != nil {
		t.Fatal(err)
	}
	await(t, l.stdout.seen("sched proclaimed host-a:2 epoch 0\n"), 30*time.Second, "the listener's proclaimed value", l)
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil { // the listener subscribed before it printed
		t.Fatal(err)
	}
	l.result(t, 30*time.Second).want(t, exitOK, "listener after SIGTERM")
}
