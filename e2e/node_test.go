package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kahunago/kahuna/internal/testport"
)

// kahunactl's exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
	exitBusy  = 3
	exitLost  = 4
)

// lockJSON is kahunactl lock --format json.
type lockJSON struct {
	Resource     string `json:"resource"`
	Status       string `json:"status"`
	Owner        string `json:"owner"`
	FencingToken int64  `json:"fencingToken"`
}

// getJSON is kahunactl get --format json.
type getJSON struct {
	Resource     string `json:"resource"`
	Status       string `json:"status"`
	Owner        string `json:"owner"`
	FencingToken int64  `json:"fencingToken"`
	Expires      string `json:"expires"`
}

func decode[T any](t *testing.T, r ctlResult) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatalf("not JSON: %v: %s", err, r)
	}
	return v
}

// TestProcesses builds the binaries once and runs the process-level
// scenarios on them.
func TestProcesses(t *testing.T) {
	t.Parallel()
	bin := build(t)
	t.Run("Node", func(t *testing.T) { testNode(t, bin) })
	t.Run("BadFlags", func(t *testing.T) { testBadFlags(t, bin) })
	t.Run("Cluster", func(t *testing.T) { testCluster(t, bin) })
}

// testNode runs the kahuna binary as a process: locks through the
// kahunactl binary and REST, SIGTERM, restart on the same data dir, and
// the persistent lock still held with the same owner and token.
func testNode(t *testing.T, bin binaries) {
	dataDir := t.TempDir()
	httpPort, grpcPort, raftPort := testport.Port(t), testport.Port(t), testport.Port(t)
	args := []string{
		"--http-ports", strconv.Itoa(httpPort),
		"--grpc-cleartext-ports", strconv.Itoa(grpcPort),
		"--raft-port", strconv.Itoa(raftPort),
		"--storage-path", dataDir,
		"--initial-cluster-partitions", "4",
	}
	endpoint := "http://127.0.0.1:" + strconv.Itoa(httpPort)
	grpcEndpoint := "http://127.0.0.1:" + strconv.Itoa(grpcPort)
	const res = "e2e/persistent"
	const eph = "e2e/ephemeral"

	node := startNode(t, bin, "kahuna", httpPort, args...)
	node.waitReady()
	out := node.stdout.String()
	for _, want := range []string{"data:  " + dataDir, "raft:  127.0.0.1:" + strconv.Itoa(raftPort), endpoint, "127.0.0.1:" + strconv.Itoa(grpcPort)} {
		if !strings.Contains(out, want) {
			t.Errorf("startup output lacks %q:\n%s", want, out)
		}
	}

	// A persistent lock through kahunactl: owner and token from its JSON.
	l := decode[lockJSON](t, ctl(t, bin, "lock", res, "--ttl", "10m", "--format", "json", "--endpoints", endpoint).want(t, exitOK))
	if l.Resource != res || l.Status != "Locked" || len(l.Owner) != 32 || l.FencingToken != 0 {
		t.Fatalf("lock: %+v", l)
	}
	// Busy for another owner, on either port.
	ctl(t, bin, "lock", res, "--owner", "intruder", "--endpoints", endpoint).want(t, exitBusy)
	ctl(t, bin, "lock", res, "--owner", "intruder", "--endpoints", grpcEndpoint).want(t, exitBusy)
	ctl(t, bin, "extend", res, "--owner", l.Owner, "--ttl", "10m", "--endpoints", endpoint).want(t, exitOK)
	g := decode[getJSON](t, ctl(t, bin, "get", res, "--format", "json", "--endpoints", endpoint).want(t, exitOK))
	if g.Status != "Got" || g.Owner != l.Owner || g.FencingToken != l.FencingToken {
		t.Fatalf("get %+v, want owner %s token %d", g, l.Owner, l.FencingToken)
	}
	if r := ctl(t, bin, "get", res, "--endpoints", endpoint).want(t, exitOK); !strings.Contains(r.stdout, "owned by "+l.Owner) {
		t.Fatalf("get text: %s", r)
	}
	// An ephemeral lock, which must not survive the restart. The restarted
	// node waits its lease out before it serves the partition (2 s: the
	// calls after the restart are answered MustRetry, and retried, until
	// then).
	ctl(t, bin, "lock", eph, "--owner", "e", "--durability", "ephemeral", "--ttl", "2s", "--endpoints", endpoint).want(t, exitOK)

	checkREST(t, endpoint)

	// SIGTERM shuts down cleanly.
	if code := node.signal(syscall.SIGTERM); code != 0 {
		t.Fatalf("exit code after SIGTERM: %d (%v)", code, node.waitErr)
	}
	if s := node.stderr.String(); strings.Contains(s, "WARNING: DATA RACE") || strings.Contains(s, "level=ERROR") {
		t.Fatalf("node logged errors or races:\n%s", tail(s, 60))
	}

	// Restart on the same data dir and ports: the persistent lock is still
	// held, by the same owner with the same token.
	node = startNode(t, bin, "kahuna (restarted)", httpPort, args...)
	node.waitReady()
	ctl(t, bin, "lock", res, "--owner", "intruder", "--endpoints", endpoint).want(t, exitBusy)
	g = decode[getJSON](t, ctl(t, bin, "get", res, "--format", "json", "--endpoints", endpoint).want(t, exitOK))
	if g.Owner != l.Owner || g.FencingToken != l.FencingToken {
		t.Fatalf("after restart get %+v, want owner %s token %d", g, l.Owner, l.FencingToken)
	}
	ctl(t, bin, "get", eph, "--durability", "ephemeral", "--endpoints", endpoint).want(t, exitLost)
	ctl(t, bin, "unlock", res, "--owner", "intruder", "--endpoints", endpoint).want(t, exitLost)
	ctl(t, bin, "unlock", res, "--owner", l.Owner, "--endpoints", endpoint).want(t, exitOK)
	ctl(t, bin, "unlock", res, "--owner", l.Owner, "--endpoints", endpoint).want(t, exitLost)
	ctl(t, bin, "get", res, "--endpoints", endpoint).want(t, exitLost)
	// The next grant's token is above the last one (from the partition's
	// ephemeral token reach: the ephemeral lock shares the partition).
	if l2 := decode[lockJSON](t, ctl(t, bin, "lock", res, "--format", "json", "--endpoints", endpoint).want(t, exitOK)); l2.FencingToken <= l.FencingToken {
		t.Fatalf("grant after restart: token %d, want above %d", l2.FencingToken, l.FencingToken)
	}

	if code := node.signal(syscall.SIGINT); code != 0 {
		t.Fatalf("exit code after SIGINT: %d", code)
	}
	// Nothing listens now: kahunactl exits 1 with one line.
	r := ctl(t, bin, "get", res, "--endpoints", endpoint).want(t, exitError)
	if strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
		t.Fatalf("unreachable: want one stderr line: %s", r)
	}
}

// checkREST makes the curl-equivalent REST calls: try-lock, get-info,
// try-extend, try-unlock, their JSON shapes, and the HTTP errors.
func checkREST(t *testing.T, base string) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	post := func(path string, body any) (int, map[string]any) {
		t.Helper()
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Post(base+path, "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			t.Fatalf("POST %s: Content-Type %q: %s", path, ct, raw)
		}
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatalf("POST %s: %v: %s", path, err, raw)
		}
		return resp.StatusCode, m
	}
	// want checks the fields of a reply, numbers as JSON numbers.
	want := func(what string, code int, m map[string]any, wantCode int, fields map[string]any) {
		t.Helper()
		if code != wantCode {
			t.Fatalf("%s: HTTP %d, want %d: %v", what, code, wantCode, m)
		}
		for k, v := range fields {
			got, ok := m[k]
			if !ok {
				t.Fatalf("%s: no field %q in %v", what, k, m)
			}
			if v != nil && got != v {
				t.Fatalf("%s: %s = %#v, want %#v (in %v)", what, k, got, v, m)
			}
		}
	}
	owner := []byte("rest-owner") // JSON: base64
	for _, d := range []float64{0, 1} {
		res := "e2e/rest/" + strconv.Itoa(int(d))
		code, m := post("/v1/locks/try-lock", map[string]any{"resource": res, "owner": owner, "expiresMs": 60000, "durability": d})
		want("try-lock", code, m, 200, map[string]any{"servedFrom": "", "type": 0.0, "fencingToken": 0.0})
		code, m = post("/v1/locks/try-lock", map[string]any{"resource": res, "owner": []byte("other"), "expiresMs": 60000, "durability": d})
		want("try-lock by another owner", code, m, 200, map[string]any{"type": 1.0})
		code, m = post("/v1/locks/get-info", map[string]any{"resource": res, "durability": d})
		want("get-info", code, m, 200, map[string]any{"servedFrom": "", "type": 4.0, "owner": "cmVzdC1vd25lcg==", "fencingToken": 0.0, "expires": nil})
		exp, ok := m["expires"].(map[string]any)
		if !ok {
			t.Fatalf("get-info expires: %v", m["expires"])
		}
		if ms, _ := exp["l"].(float64); time.Until(time.UnixMilli(int64(ms))) < 30*time.Second || time.Until(time.UnixMilli(int64(ms))) > 61*time.Second {
			t.Fatalf("get-info expires.l %v is not about a minute away", exp["l"])
		}
		code, m = post("/v1/locks/try-extend", map[string]any{"resource": res, "owner": owner, "expiresMs": 60000, "durability": d})
		want("try-extend", code, m, 200, map[string]any{"type": 2.0, "fencingToken": 0.0})
		code, m = post("/v1/locks/try-unlock", map[string]any{"resource": res, "owner": owner, "durability": d})
		want("try-unlock", code, m, 200, map[string]any{"type": 3.0})
		code, m = post("/v1/locks/get-info", map[string]any{"resource": res, "durability": d})
		want("get-info after unlock", code, m, 200, map[string]any{"type": 102.0})
		if len(m) != 1 {
			t.Fatalf("get-info of no lock carries only the type: %v", m)
		}
		code, m = post("/v1/locks/try-unlock", map[string]any{"resource": res, "owner": owner, "durability": d})
		want("try-unlock again", code, m, 200, map[string]any{"type": 102.0})
	}
	code, m := post("/v1/locks/try-lock", map[string]any{"resource": "", "owner": owner, "expiresMs": 1000})
	want("try-lock without a resource", code, m, 200, map[string]any{"type": 100.0})

	// Client mistakes are HTTP errors with a JSON error.
	resp, err := c.Post(base+"/v1/locks/try-lock", "text/plain", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Fatalf("text/plain body: HTTP %d", resp.StatusCode)
	}
	resp, err = c.Get(base + "/v1/locks/try-lock")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET try-lock: HTTP %d", resp.StatusCode)
	}
	resp, err = c.Post(base+"/v1/locks/try-lock", "application/json", strings.NewReader(`{"resource":`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), `"error"`) {
		t.Fatalf("malformed JSON: HTTP %d %s", resp.StatusCode, body)
	}
	// The admin API on the same port.
	resp, err = c.Get(base + "/v1/admin/partitions")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	var parts struct {
		Node       uint64 `json:"node"`
		Partitions []struct {
			Partition int    `json:"partition"`
			Leader    uint64 `json:"leader"`
			Serving   bool   `json:"serving"`
		} `json:"partitions"`
	}
	if err := json.Unmarshal(body, &parts); err != nil || resp.StatusCode != 200 || parts.Node != 1 || len(parts.Partitions) != 4 {
		t.Fatalf("admin partitions: HTTP %d %s (%v)", resp.StatusCode, body, err)
	}
	for _, p := range parts.Partitions {
		if p.Leader != 1 || !p.Serving {
			t.Fatalf("admin partitions: %s", body)
		}
	}
}

// testBadFlags: the binary refuses bad flags with exit 2, the reason on
// one line ("kahuna: ...") at the end of stderr, and serves nothing.
func testBadFlags(t *testing.T, bin binaries) {
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"--no-such-flag"}, "kahuna: flag provided but not defined: -no-such-flag"},
		{[]string{"--http-ports", "abc"}, `kahuna: --http-ports: "abc" is not a port (1..65535)`},
		{[]string{"--log-level", "loud"}, "kahuna: --log-level"},
		{[]string{"stray"}, `kahuna: unexpected argument "stray"`},
	} {
		cmd := exec.Command(bin.kahuna, c.args...)
		cmd.Env = procEnv()
		cmd.Dir = t.TempDir()
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		code := exitCode(cmd.Run())
		lines := strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n")
		last := lines[len(lines)-1]
		if code != 2 || stdout.Len() != 0 || !strings.HasPrefix(last, c.says) {
			t.Errorf("%q: exit %d, stdout %q, last stderr line %q, want exit 2 and %q", c.args, code, stdout.String(), last, c.says)
		}
		// A bad value is reported on exactly one line; an unknown flag
		// also gets the flag list (the flag package's usage) above it.
		if c.args[0] != "--no-such-flag" && len(lines) != 1 {
			t.Errorf("%q: want one stderr line, got %d:\n%s", c.args, len(lines), stderr.String())
		}
	}
}
