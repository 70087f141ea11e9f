package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/admin"
	"github.com/kahunago/kahuna/internal/testport"
)

func TestMain(m *testing.M) {
	// Keep the test output free of any std log line.
	log.SetOutput(io.Discard)
	os.Exit(m.Run())
}

// startNode opens a single in-memory node serving the wire API (REST,
// gRPC and the admin API) on a free loopback port, and returns its URL.
func startNode(t *testing.T) (*kahuna.Node, string) {
	t.Helper()
	n, err := kahuna.Open(kahuna.Config{ListenAddress: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return n, "http://" + n.ListenAddress()
}

// result is one kahunactl run.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
}

// ctl runs kahunactl in-process with args.
func ctl(t *testing.T, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, &stdout, &stderr)
	return result{code, stdout.String(), stderr.String()}
}

// want fails the test unless r exited with code.
func (r result) want(t *testing.T, code int, what string) result {
	t.Helper()
	if r.code != code {
		t.Fatalf("%s: want exit %d, got %s", what, code, r)
	}
	return r
}

// jsonOut decodes a --format json answer: exactly one JSON object.
func (r result) jsonOut(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("not JSON: %v (%s)", err, r)
	}
	if dec.More() {
		t.Fatalf("more than one JSON value: %s", r)
	}
	return m
}

func oneStderrLine(t *testing.T, r result, contains string) {
	t.Helper()
	s := strings.TrimSuffix(r.stderr, "\n")
	if s == "" || strings.Contains(s, "\n") || !strings.HasPrefix(s, "kahunactl: ") || !strings.Contains(s, contains) {
		t.Fatalf("want one stderr line \"kahunactl: ...%s...\", got %s", contains, r)
	}
}

var lockedText = regexp.MustCompile(`^locked (\S+) owner (\S+) fencing token (\d+)\n$`)

// TestLifecycleText walks every lock command and its exit codes with the
// text format, for both durabilities.
func TestLifecycleText(t *testing.T) {
	_, ep := startNode(t)
	for _, d := range []string{"persistent", "ephemeral"} {
		t.Run(d, func(t *testing.T) {
			res := "text/" + d
			flags := []string{"--endpoints", ep, "--durability", d}
			c := func(args ...string) result { return ctl(t, append(args, flags...)...) }

			r := c("lock", res, "--ttl", "1m").want(t, exitOK, "lock")
			m := lockedText.FindStringSubmatch(r.stdout)
			if m == nil || m[1] != res || m[3] != "0" {
				t.Fatalf("lock output: %s", r)
			}
			owner := m[2]
			if len(owner) != 32 {
				t.Fatalf("default owner %q: want 32 hex characters", owner)
			}

			r = c("lock", res, "--owner", "intruder").want(t, exitBusy, "lock by another owner")
			if r.stdout != "lock "+res+": busy (held by another owner)\n" {
				t.Fatalf("busy output: %s", r)
			}
			// The same owner locking again is granted the same token.
			r = c("lock", res, "--owner", owner).want(t, exitOK, "relock by the owner")
			if want := fmt.Sprintf("locked %s owner %s fencing token 0\n", res, owner); r.stdout != want {
				t.Fatalf("relock output: %s, want %q", r, want)
			}

			r = c("extend", res, "--owner", owner, "--ttl", "2m").want(t, exitOK, "extend")
			if r.stdout != "extend "+res+": Extended, fencing token 0\n" {
				t.Fatalf("extend output: %s", r)
			}
			c("extend", res, "--owner", "intruder").want(t, exitLost, "extend by another owner")

			r = c("get", res).want(t, exitOK, "get")
			if !strings.HasPrefix(r.stdout, res+" owned by "+owner+", fencing token 0, expires ") {
				t.Fatalf("get output: %s", r)
			}
			exp, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(r.stdout[strings.LastIndex(r.stdout, " ")+1:]))
			if err != nil {
				t.Fatalf("get expiry: %v (%s)", err, r)
			}
			if left := time.Until(exp); left < time.Minute || left > 2*time.Minute+5*time.Second {
				t.Fatalf("expiry %v is %v away, want about 2m (the extend)", exp, left)
			}

			r = c("unlock", res, "--owner", "intruder").want(t, exitLost, "unlock by another owner")
			if r.stdout != "unlock "+res+": not the owner (another owner holds it, or held it last and its lease has expired)\n" {
				t.Fatalf("unlock by another owner output: %s", r)
			}
			r = c("unlock", res, "--owner", owner).want(t, exitOK, "unlock")
			if r.stdout != "unlock "+res+": Unlocked\n" {
				t.Fatalf("unlock output: %s", r)
			}
			r = c("unlock", res, "--owner", owner).want(t, exitLost, "unlock again")
			if r.stdout != "unlock "+res+": no such lock (never locked, released or expired)\n" {
				t.Fatalf("second unlock output: %s", r)
			}
			c("extend", res, "--owner", owner).want(t, exitLost, "extend after unlock")
			r = c("get", res).want(t, exitLost, "get after unlock")
			if r.stdout != "get "+res+": no such lock (never locked, released or expired)\n" {
				t.Fatalf("get after unlock output: %s", r)
			}

			// The next grant carries the next token.
			r = c("lock", res, "--owner", "second").want(t, exitOK, "lock again")
			if want := fmt.Sprintf("locked %s owner second fencing token 1\n", res); r.stdout != want {
				t.Fatalf("second grant: %s, want %q", r, want)
			}
		})
	}
}

// TestLifecycleJSON is the same walk with --format json.
func TestLifecycleJSON(t *testing.T) {
	_, ep := startNode(t)
	for _, d := range []string{"persistent", "ephemeral"} {
		t.Run(d, func(t *testing.T) {
			res := "json/" + d
			flags := []string{"--endpoints", ep, "--durability", d, "--format", "json"}
			c := func(args ...string) result { return ctl(t, append(args, flags...)...) }
			check := func(m map[string]any, want map[string]any) {
				t.Helper()
				for k, v := range want {
					if fmt.Sprint(m[k]) != fmt.Sprint(v) {
						t.Fatalf("field %s = %v, want %v (in %v)", k, m[k], v, m)
					}
				}
			}

			m := c("lock", res).want(t, exitOK, "lock").jsonOut(t)
			owner, _ := m["owner"].(string)
			check(m, map[string]any{"resource": res, "status": "Locked", "fencingToken": 0})
			if len(owner) != 32 {
				t.Fatalf("owner %q", owner)
			}

			m = c("lock", res, "--owner", "intruder").want(t, exitBusy, "busy").jsonOut(t)
			check(m, map[string]any{"resource": res, "status": "Busy", "owner": "intruder"})
			if _, ok := m["fencingToken"]; ok {
				t.Fatalf("busy answer with a fencing token: %v", m)
			}

			m = c("extend", res, "--owner", owner).want(t, exitOK, "extend").jsonOut(t)
			check(m, map[string]any{"resource": res, "status": "Extended", "owner": owner, "fencingToken": 0})

			m = c("get", res).want(t, exitOK, "get").jsonOut(t)
			check(m, map[string]any{"resource": res, "status": "Got", "owner": owner, "fencingToken": 0})
			if _, err := time.Parse(time.RFC3339Nano, fmt.Sprint(m["expires"])); err != nil {
				t.Fatalf("expires: %v", err)
			}

			m = c("unlock", res, "--owner", "intruder").want(t, exitLost, "unlock by another").jsonOut(t)
			check(m, map[string]any{"status": "InvalidOwner"})
			m = c("unlock", res, "--owner", owner).want(t, exitOK, "unlock").jsonOut(t)
			check(m, map[string]any{"resource": res, "status": "Unlocked", "owner": owner})
			if _, ok := m["fencingToken"]; ok {
				t.Fatalf("unlock answer with a fencing token: %v", m)
			}
			m = c("unlock", res, "--owner", owner).want(t, exitLost, "unlock again").jsonOut(t)
			check(m, map[string]any{"status": "LockDoesNotExist"})
			m = c("get", res).want(t, exitLost, "get after unlock").jsonOut(t)
			check(m, map[string]any{"resource": res, "status": "LockDoesNotExist"})
			m = c("extend", res, "--owner", owner).want(t, exitLost, "extend after unlock").jsonOut(t)
			check(m, map[string]any{"status": "LockDoesNotExist"})
		})
	}
}

// TestOneLockPerName: a name is one lock whatever durability each call
// names: a persistent holder is seen by an ephemeral get and makes an
// ephemeral lock by another owner busy.
func TestOneLockPerName(t *testing.T) {
	_, ep := startNode(t)
	ctl(t, "lock", "one/r", "--owner", "p", "--endpoints", ep).want(t, exitOK, "persistent lock")
	ctl(t, "get", "one/r", "--durability", "ephemeral", "--endpoints", ep).want(t, exitOK, "ephemeral get")
	ctl(t, "lock", "one/r", "--owner", "e", "--durability", "ephemeral", "--endpoints", ep).want(t, exitBusy, "ephemeral lock by another owner")
}

// TestWaitForRelease: --wait keeps trying while busy and gets the lock once
// the holder's short lease runs out; without --wait it is busy at once.
func TestWaitForRelease(t *testing.T) {
	_, ep := startNode(t)
	ctl(t, "lock", "wait/r", "--owner", "first", "--ttl", "300ms", "--durability", "ephemeral", "--endpoints", ep).want(t, exitOK, "lock")
	ctl(t, "lock", "wait/r", "--owner", "second", "--durability", "ephemeral", "--endpoints", ep).want(t, exitBusy, "no wait")
	r := ctl(t, "lock", "wait/r", "--owner", "second", "--wait", "10s", "--durability", "ephemeral", "--endpoints", ep).want(t, exitOK, "wait")
	if r.stdout != "locked wait/r owner second fencing token 1\n" {
		t.Fatalf("after wait: %s", r)
	}
}

// TestFlagsAnywhere: the RESOURCE may come before, between or after flags.
func TestFlagsAnywhere(t *testing.T) {
	_, ep := startNode(t)
	ctl(t, "lock", "--endpoints", ep, "any/r", "--owner", "o").want(t, exitOK, "resource between flags")
	ctl(t, "get", "--endpoints", ep, "--format", "json", "any/r").want(t, exitOK, "resource last")
	ctl(t, "unlock", "any/r", "--owner", "o", "--endpoints", ep).want(t, exitOK, "resource first")
	// After "--" a RESOURCE may start with '-'.
	ctl(t, "lock", "--owner", "o", "--endpoints", ep, "--", "-dash").want(t, exitOK, "resource after --")
	ctl(t, "get", "--endpoints", ep, "--", "-dash").want(t, exitOK, "get after --")
}

// The common flags may come before the command too, as etcdctl's do;
// the endpoints may come from $KAHUNA_ENDPOINTS, and a bare host:port is
// an http:// URL.
func TestCommonFlagsBeforeCommandAndEndpoints(t *testing.T) {
	_, ep := startNode(t)
	ctl(t, "--endpoints", ep, "--format", "json", "lock", "pre/r", "--owner", "o").want(t, exitOK, "flags before lock")
	r := ctl(t, "--endpoints="+ep, "get", "pre/r").want(t, exitOK, "--endpoints= before get")
	if !strings.HasPrefix(r.stdout, "pre/r owned by o,") {
		t.Fatalf("get: %s", r)
	}
	ctl(t, "--timeout", "5s", "member", "--endpoints", ep, "list").want(t, exitOK, "flags before member")
	bare := strings.TrimPrefix(ep, "http://")
	ctl(t, "get", "pre/r", "--endpoints", bare).want(t, exitOK, "bare host:port")
	t.Setenv("KAHUNA_ENDPOINTS", bare)
	ctl(t, "unlock", "pre/r", "--owner", "o").want(t, exitOK, "endpoints from $KAHUNA_ENDPOINTS")
	// A flag wins over the environment.
	t.Setenv("KAHUNA_ENDPOINTS", "http://127.0.0.1:1")
	ctl(t, "lock", "pre/r", "--endpoints", ep).want(t, exitOK, "--endpoints over $KAHUNA_ENDPOINTS")
}

func TestUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"frobnicate", "x"}, `unknown command "frobnicate"`},
		{[]string{"lock"}, "lock needs a RESOURCE"},
		{[]string{"get", "--format", "json"}, "get needs a RESOURCE"},
		{[]string{"extend", "r"}, "extend needs --owner"},
		{[]string{"unlock", "r"}, "unlock needs --owner"},
		{[]string{"lock", "r", "--durability", "forever"}, "--durability must be persistent or ephemeral"},
		{[]string{"lock", "r", "--format", "yaml"}, "--format must be text or json"},
		{[]string{"lock", "r", "--ttl", "0s"}, "--ttl must be positive"},
		{[]string{"extend", "r", "--owner", "o", "--ttl", "-1s"}, "--ttl must be positive"},
		{[]string{"lock", "r", "--wait", "-1s"}, "--wait must not be negative"},
		{[]string{"get", "r", "--timeout", "0s"}, "--timeout must be positive"},
		{[]string{"lock", "r", "s"}, `unexpected argument "s"`},
		{[]string{"lock", "", "s"}, `unexpected argument "s"`},
		{[]string{"lock", ""}, "lock needs a RESOURCE"},
		{[]string{"partitions", "r"}, "partitions takes no RESOURCE"},
		{[]string{"get", "r", "--endpoints", " , "}, "--endpoints: no endpoint given"},
		{[]string{"get", "r", "--endpoints", "grpc://127.0.0.1:2070"}, "is not a host:port or an http:// or https:// URL"},
		{[]string{"member", "list", "--endpoints", "ftp://x"}, "is not a host:port or an http:// or https:// URL"},
		{[]string{"lock", " \t"}, `lock: RESOURCE " \t" is only white space`},
		{[]string{"lock", "r", "--owner", ""}, "--owner is empty (leave it out for a fresh random owner)"},
		{[]string{"--bogus", "x", "get", "r"}, "--bogus before the command: only the common flags"},
		{[]string{"--endpoints", "http://x:1"}, "no command after --endpoints http://x:1"},
		{[]string{"--endpoints"}, "--endpoints needs a value"},
		{[]string{"transfer-leadership"}, "needs --partition P and --to NODE"},
		{[]string{"transfer-leadership", "--partition", "1"}, "needs --partition P and --to NODE"},
		{[]string{"transfer-leadership", "--to", "2"}, "needs --partition P and --to NODE"},
	} {
		r := ctl(t, c.args...)
		if r.code != exitUsage || r.stdout != "" {
			t.Errorf("%q: want exit 2 and nothing on stdout, got %s", c.args, r)
			continue
		}
		if !strings.Contains(r.stderr, "kahunactl: "+c.says) && !strings.Contains(r.stderr, c.says) {
			t.Errorf("%q: stderr should say %q: %s", c.args, c.says, r)
		}
	}
	// A bad flag is one line saying which flag and why, not the flag list.
	for _, c := range []struct {
		args []string
		line string
	}{
		{[]string{"lock", "r", "--bogus"}, "kahunactl: lock has no flag --bogus (kahunactl lock -h lists its flags)"},
		{[]string{"get", "r", "--ttl", "5s"}, "kahunactl: get has no flag --ttl (kahunactl get -h lists its flags)"},
		{[]string{"lock", "r", "--ttl", "5sec"}, `kahunactl: --ttl "5sec": not a duration (a number and a unit: 500ms, 30s, 5m, 1h)`},
		{[]string{"lock", "r", "--wait=soon"}, `kahunactl: --wait "soon": not a duration (a number and a unit: 500ms, 30s, 5m, 1h)`},
		{[]string{"get", "r", "--timeout", "10"}, `kahunactl: --timeout "10": not a duration (a number and a unit: 500ms, 30s, 5m, 1h)`},
		{[]string{"lock", "r", "--ttl"}, "kahunactl: --ttl needs a value"},
		{[]string{"transfer-leadership", "--partition", "three", "--to", "1"}, `kahunactl: --partition "three": not a valid number`},
		{[]string{"lock", "r", "--"}, "kahunactl: lock r --: no CMD to run after --"},
	} {
		r := ctl(t, c.args...)
		if r.code != exitUsage || r.stdout != "" || r.stderr != c.line+"\n" {
			t.Errorf("%q: want exit 2 and the one line %q, got %s", c.args, c.line, r)
		}
	}
	// No arguments at all: the usage, on stderr.
	if r := ctl(t); r.code != exitUsage || !strings.HasPrefix(r.stderr, "usage: kahunactl") {
		t.Errorf("no args: %s", r)
	}
}

func TestHelpExitsZero(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}} {
		if r := ctl(t, args...); r.code != exitOK || !strings.HasPrefix(r.stdout, "usage: kahunactl") || !strings.Contains(r.stdout, "exit codes") {
			t.Errorf("%q: %s", args, r)
		}
	}
}

// TestCommandHelp: each command's -h prints its synopsis, a one-line
// description and its own flags only, on stdout, and exits 0.
func TestCommandHelp(t *testing.T) {
	want := map[string][]string{
		"lock":                {"durability", "endpoints", "format", "grace", "owner", "read", "timeout", "ttl", "wait", "write"},
		"extend":              {"durability", "endpoints", "format", "owner", "timeout", "ttl"},
		"unlock":              {"durability", "endpoints", "format", "owner", "timeout"},
		"get":                 {"durability", "endpoints", "format", "timeout"},
		"locks":               {"after", "endpoints", "format", "limit", "timeout"},
		"partitions":          {"endpoints", "format", "timeout"},
		"transfer-leadership": {"endpoints", "format", "partition", "timeout", "to"},
		"member":              {"endpoint", "endpoints", "format", "raft-address", "timeout"},
		"status":              {"endpoints", "format", "partitions", "timeout"},
		"watch":               {"endpoints", "format", "timeout"},
		"elect":               {"durability", "endpoints", "format", "grace", "listen", "timeout", "ttl"},
		"semaphore":           {"endpoints", "format", "grace", "limit", "n", "owner", "set-limit", "timeout", "ttl", "wait"},
	}
	for name, flags := range want { // the common connection flags (conn.go)
		want[name] = append(flags, "ca-file", "token", "v")
		sort.Strings(want[name])
	}
	flagLine := regexp.MustCompile(`^  --([a-z-]+) `)
	for _, c := range commands {
		for _, h := range []string{"-h", "--help"} {
			r := ctl(t, c.name, h).want(t, exitOK, c.name+" "+h)
			lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
			if r.stderr != "" || len(lines) < 5 || lines[0] != "usage: kahunactl "+c.name+" "+c.args || lines[1] != "" ||
				lines[2] != strings.ToUpper(c.summary[:1])+c.summary[1:]+"." || lines[3] != "" || lines[4] != "flags:" {
				t.Fatalf("%s %s: %s", c.name, h, r)
			}
			var got []string
			for _, l := range lines[5:] {
				m := flagLine.FindStringSubmatch(l)
				if m == nil {
					t.Fatalf("%s %s: not a flag line %q", c.name, h, l)
				}
				got = append(got, m[1])
			}
			if fmt.Sprint(got) != fmt.Sprint(want[c.name]) {
				t.Errorf("%s %s lists flags %v, want %v", c.name, h, got, want[c.name])
			}
		}
		if !strings.Contains(ctl(t, "-h").stdout, "  "+c.name+" ") {
			t.Errorf("kahunactl -h does not list %s", c.name)
		}
	}
	if r := ctl(t, "lock", "-h").stdout; !strings.Contains(r, "--ttl duration ") || !strings.Contains(r, "(default 30s)") {
		t.Errorf("lock -h: durations should show as such, with their defaults: %s", r)
	}
	// Each help says what holds for its command: --wait only where there
	// is one, no default for a required flag.
	if r := ctl(t, "get", "-h").stdout; strings.Contains(r, "--wait") {
		t.Errorf("get -h mentions --wait, which get has not: %s", r)
	}
	// --durability on a lock already taken says that a kahuna node ignores
	// it (one lock per name) and a Kahuna server does not.
	for _, c := range []string{"get", "extend", "unlock"} {
		if r := ctl(t, c, "-h").stdout; !strings.Contains(r, "a kahuna node has one lock per name and acts on it whatever this says") {
			t.Errorf("%s -h does not say what --durability does: %s", c, r)
		}
	}
	if r := ctl(t, "transfer-leadership", "-h").stdout; !strings.Contains(r, "the partition (required)\n") {
		t.Errorf("transfer-leadership -h: a required flag shows a default: %s", r)
	}
}

func TestVersion(t *testing.T) {
	for _, arg := range []string{"--version", "-version", "version"} {
		r := ctl(t, arg).want(t, exitOK, arg)
		if !strings.HasPrefix(r.stdout, "kahunactl ") || strings.Count(r.stdout, "\n") != 1 || r.stderr != "" {
			t.Errorf("%s: %s", arg, r)
		}
	}

}

// TestWaitLongerThanTimeout: --timeout bounds the calls and --wait comes
// on top of it, so a wait longer than the timeout on a busy lock ends in
// exit 3 (busy) after the whole wait, not in a timeout error.
func TestWaitLongerThanTimeout(t *testing.T) {
	_, ep := startNode(t)
	ctl(t, "lock", "wt/r", "--owner", "holder", "--ttl", "1m", "--endpoints", ep).want(t, exitOK, "lock")
	start := time.Now()
	r := ctl(t, "lock", "wt/r", "--owner", "waiter", "--wait", "1500ms", "--timeout", "300ms", "--endpoints", ep).want(t, exitBusy, "wait over the timeout")
	if took := time.Since(start); took < 1500*time.Millisecond {
		t.Fatalf("busy after %v, before the 1.5s wait was over: %s", took, r)
	}
	if r.stdout != "lock wt/r: busy (held by another owner)\n" {
		t.Fatalf("output: %s", r)
	}
}

// closedEndpoint is a loopback URL nothing listens on: a port reserved
// for the test, which nothing else may bind meanwhile.
func closedEndpoint(t *testing.T) string {
	t.Helper()
	return "http://" + testport.Addr(t)
}

func TestUnreachableEndpointExitsOne(t *testing.T) {
	dead := closedEndpoint(t)
	for _, args := range [][]string{
		{"lock", "r"},
		{"extend", "r", "--owner", "o"},
		{"unlock", "r", "--owner", "o"},
		{"get", "r", "--format", "json"},
		{"partitions"},
		{"transfer-leadership", "--partition", "0", "--to", "1"},
	} {
		r := ctl(t, append(args, "--endpoints", dead, "--timeout", "10s")...)
		if r.code != exitError || r.stdout != "" {
			t.Errorf("%q: want exit 1, got %s", args, r)
			continue
		}
		oneStderrLine(t, r, "cannot reach "+dead+": connection refused — is a kahuna node running there?")
		// -v adds the transport's own words, on the same line.
		r = ctl(t, append(args, "--endpoints", dead, "--timeout", "10s", "-v")...)
		oneStderrLine(t, r, "connection refused")
		if !strings.Contains(r.stderr, "dial tcp") {
			t.Errorf("%q -v: no transport details: %s", args, r)
		}
	}
}

// explain names the endpoint and the likely mistake for each way a node
// cannot be reached, and leaves other errors to speak for themselves.
func TestExplain(t *testing.T) {
	eps := []string{"http://127.0.0.1:2073"}
	for _, c := range []struct {
		err  error
		want string
	}{
		{errors.New(`opening a stream to http://127.0.0.1:2073: rpc error: code = Unavailable desc = connection error: desc = "error reading server preface: EOF"`),
			"http://127.0.0.1:2073 does not answer as a kahuna API port (a Raft port? the API listens on --http-ports, 2070 by default)"},
		{errors.New(`no endpoint reachable: Get "http://127.0.0.1:2073/v1/admin/members": EOF`),
			"http://127.0.0.1:2073 does not answer as a kahuna API port (a Raft port? the API listens on --http-ports, 2070 by default)"},
		{fmt.Errorf("dial: %w", syscall.ECONNREFUSED), "cannot reach http://127.0.0.1:2073: connection refused — is a kahuna node running there?"},
		{errors.New("name resolver error: produced zero addresses"), "cannot resolve the host of http://127.0.0.1:2073"},
		{fmt.Errorf("get: %w", context.DeadlineExceeded), "no answer from http://127.0.0.1:2073 within --timeout 5s (a node that does not answer, or https:// to a port without TLS?)"},
		{errors.New("lease: something else"), ""},
	} {
		if got := explain(c.err, eps, 5*time.Second); got != c.want {
			t.Errorf("explain(%v) = %q, want %q", c.err, got, c.want)
		}
	}
	if got := explain(syscall.ECONNREFUSED, []string{"http://a:1", "http://b:1"}, 0); got != "cannot reach any of http://a:1, http://b:1: connection refused — is a kahuna node running there?" {
		t.Errorf("two endpoints: %q", got)
	}
}

// TestSecondEndpointServes: a dead first endpoint is skipped.
func TestSecondEndpointServes(t *testing.T) {
	_, ep := startNode(t)
	eps := closedEndpoint(t) + "," + ep
	ctl(t, "lock", "two/r", "--owner", "o", "--endpoints", eps).want(t, exitOK, "lock")
	ctl(t, "get", "two/r", "--endpoints", eps).want(t, exitOK, "get")
	ctl(t, "partitions", "--endpoints", eps).want(t, exitOK, "partitions")
}

// TestInvalidInputExitsTwo: bad input kahunactl can see itself (the
// node's own rule, lease.Check) is a usage error, said in one line with
// the reason and at most 64 bytes of the resource, before any call (the
// endpoint here is dead: nothing is dialled).
func TestInvalidInputExitsTwo(t *testing.T) {
	dead := closedEndpoint(t)
	long := strings.Repeat("x", 2000)
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"lock", "x", "--ttl", "1000h"}, "kahunactl: lock x: invalid input: ttl 1000h0m0s is over the limit of 596h31m23.647s"},
		{[]string{"extend", "x", "--owner", "o", "--ttl", "1000h"}, "kahunactl: extend x: invalid input: ttl 1000h0m0s is over the limit of 596h31m23.647s"},
		{[]string{"lock", "x", "--wait", "1000h"}, "kahunactl: lock x: invalid input: wait 1000h0m0s is over the limit of 596h31m23.647s"},
		{[]string{"lock", "x", "--wait", "1000h", "--", "true"}, "kahunactl: lock x: invalid input: wait 1000h0m0s"},
		{[]string{"lock", long}, "kahunactl: lock " + long[:64] + "…(2000 bytes): invalid input: resource is 2000 bytes, over the limit of 1024"},
		{[]string{"get", long, "--format", "json"}, "kahunactl: get " + long[:64] + "…(2000 bytes): invalid input: resource is 2000 bytes, over the limit of 1024"},
		{[]string{"unlock", "x", "--owner", long}, "kahunactl: unlock x: invalid input: owner is 2000 bytes, over the limit of 1024"},
		{[]string{"lock", "x", "--owner", long, "--", "true"}, "kahunactl: lock x: invalid input: owner is 2000 bytes, over the limit of 1024"},
		{[]string{"get", "r\xff"}, "kahunactl: get r\uFFFD: invalid input: resource is not valid UTF-8"},
	} {
		r := ctl(t, append(c.args, "--endpoints", dead)...)
		if r.code != exitUsage || r.stdout != "" || r.stderr != c.says+"\n" && !strings.HasPrefix(r.stderr, c.says) {
			t.Errorf("%.60q: want exit 2 and %q, got %s", c.args, c.says, r)
		}
		if strings.Count(r.stderr, "\n") != 1 || strings.Contains(r.stderr, long[:100]) {
			t.Errorf("%.60q: not one short line: %.200s", c.args, r.stderr)
		}
	}
}

// TestReportReason: a refusal that only the node saw is said in words,
// with its reason (text and json), and exits 1; other refusals are said
// in words too.
func TestReportReason(t *testing.T) {
	for _, c := range []struct {
		r            kahuna.Result
		text         string
		code         int
		json, reason string
	}{
		{kahuna.Result{Status: kahuna.InvalidInput, Reason: "wait is only for a lock"}, "lock x: invalid input: wait is only for a lock\n", exitError, "InvalidInput", "wait is only for a lock"},
		{kahuna.Result{Status: kahuna.InvalidInput}, "lock x: invalid input\n", exitError, "InvalidInput", ""},
		{kahuna.Result{Status: kahuna.MustRetry}, "lock x: must retry (the node cannot serve it now; nothing was applied)\n", exitError, "MustRetry", ""},
		{kahuna.Result{Status: kahuna.Errored}, "lock x: outcome unknown (the request may or may not have been applied)\n", exitError, "Errored", ""},
		{kahuna.Result{Status: kahuna.InvalidOwner}, "lock x: held by another owner\n", exitLost, "InvalidOwner", ""},
	} {
		var text, js bytes.Buffer
		if code := report(printer{w: &text}, io.Discard, "lock", "x", "", c.r, nil, kahuna.Locked); code != c.code || text.String() != c.text {
			t.Errorf("%v: exit %d %q, want %d %q", c.r.Status, code, text.String(), c.code, c.text)
		}
		report(printer{w: &js, json: true}, io.Discard, "lock", "x", "", c.r, nil, kahuna.Locked)
		var m map[string]any
		if err := json.Unmarshal(js.Bytes(), &m); err != nil || m["status"] != c.json || (c.reason != "") != (m["reason"] != nil) || c.reason != "" && m["reason"] != c.reason {
			t.Errorf("%v: json %s, want status %s reason %q", c.r.Status, js.String(), c.json, c.reason)
		}
	}
}

func TestPartitions(t *testing.T) {
	_, ep := startNode(t)
	r := ctl(t, "partitions", "--endpoints", ep).want(t, exitOK, "partitions")
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if len(lines) != 1+kahuna.DefaultSingleNodePartitions || lines[0] != "as seen by node 1:" {
		t.Fatalf("partitions output: %s", r)
	}
	for p, l := range lines[1:] {
		if want := "  partition " + strconv.Itoa(p) + ": leader 1 (served here)"; l != want {
			t.Fatalf("line %q, want %q", l, want)
		}
	}

	r = ctl(t, "partitions", "--endpoints", ep, "--format", "json").want(t, exitOK, "partitions json")
	var body admin.PartitionsView
	if err := json.Unmarshal([]byte(r.stdout), &body); err != nil {
		t.Fatalf("%v: %s", err, r)
	}
	if body.Node != 1 || len(body.Partitions) != kahuna.DefaultSingleNodePartitions {
		t.Fatalf("partitions json: %+v", body)
	}
	for p, info := range body.Partitions {
		if info != (admin.PartitionInfo{Partition: p, Leader: 1, Serving: true}) {
			t.Fatalf("partition %d: %+v", p, info)
		}
	}
}

func TestTransferLeadership(t *testing.T) {
	n, ep := startNode(t)
	r := ctl(t, "transfer-leadership", "--partition", "0", "--to", "5", "--endpoints", ep).want(t, exitError, "transfer to a non-member")
	oneStderrLine(t, r, "node 5 is not a member")
	if r.stdout != "" {
		t.Fatalf("stdout on failure: %s", r)
	}
	r = ctl(t, "transfer-leadership", "--partition", "99", "--to", "1", "--endpoints", ep).want(t, exitError, "transfer of a partition that does not exist")
	oneStderrLine(t, r, "no partition 99")

	// To the node that already leads: accepted, and nothing changes.
	r = ctl(t, "transfer-leadership", "--partition", "0", "--to", "1", "--endpoints", ep, "--format", "json").want(t, exitOK, "transfer to the leader")
	if m := r.jsonOut(t); fmt.Sprintf("%v %v %v", m["partition"], m["to"], m["status"]) != "0 1 requested" {
		t.Fatalf("transfer json: %s", r)
	}
	r = ctl(t, "transfer-leadership", "--partition", "0", "--to", "1", "--endpoints", ep).want(t, exitOK, "transfer text")
	if r.stdout != "leadership of partition 0 requested for node 1\n" {
		t.Fatalf("transfer text: %s", r)
	}
	if leader, serving := n.Leader(0); leader != 1 || !serving {
		t.Fatalf("partition 0 after a transfer to its leader: leader %d serving %v", leader, serving)
	}
	ctl(t, "lock", "after-transfer", "--endpoints", ep).want(t, exitOK, "lock after transfer")
}

func TestOneLine(t *testing.T) {
	err := fmt.Errorf("transport: no endpoint reachable: %w", fmt.Errorf("dial a: refused\ndial a: refused\ndial b: refused"))
	if got, want := oneLine(err), "transport: no endpoint reachable: dial a: refused; dial b: refused"; got != want {
		t.Fatalf("oneLine = %q, want %q", got, want)
	}
}

// TestStatus: one row per member by default, as etcdctl endpoint status;
// --partitions a row per member and partition; an endpoint that does not
// answer is a row saying why, and exit 1.
func TestStatus(t *testing.T) {
	_, ep := startNode(t)
	r := ctl(t, "status", "--endpoints", ep).want(t, exitOK, "status")
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "ENDPOINT NODE HEALTH RUNNING LEADS TERM APPLIED ERROR" {
		t.Fatalf("status: %s", r)
	}
	if f := strings.Fields(lines[1]); len(f) != 7 || f[0] != ep || f[1] != "1" || f[2] != "healthy" || f[3] != "1/1" || f[4] != "1" {
		t.Fatalf("status row %q: want endpoint, node 1, healthy, 1/1 running, leads 1, term, applied", lines[1])
	}
	r = ctl(t, "status", "--partitions", "--endpoints", ep).want(t, exitOK, "status --partitions")
	lines = strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "ENDPOINT") || !strings.Contains(lines[0], "PARTITION") || !strings.Contains(lines[1], " yes ") {
		t.Fatalf("status --partitions: %s", r)
	}
	dead := closedEndpoint(t)
	r = ctl(t, "status", "--endpoints", ep+","+dead).want(t, exitError, "status with a dead endpoint")
	if !strings.Contains(r.stdout, dead) || !strings.Contains(r.stdout, "unreachable") || !strings.Contains(r.stdout, "connection refused") {
		t.Fatalf("status with a dead endpoint: %s", r)
	}
}
