package main

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
	knode "github.com/kahunago/kahuna/internal/node"
	"github.com/kahunago/kahuna/internal/testport"
	"github.com/kahunago/kahuna/lease"
)

// scrape returns the sample lines of the handler's exposition.
func scrape(t *testing.T, h http.Handler) []string {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var lines []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if l := sc.Text(); l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	return lines
}

var requestSeries = regexp.MustCompile(`^kahuna_requests_total\{durability="(\w+)",op="(\w+)",status="(\w+)"\} (\S+)$`)

func TestMetricsSeries(t *testing.T) {
	m := newMetrics()
	node, err := knode.Open(knode.Config{Partitions: 2, Observe: m.observeRequest})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	m.watch(node)
	ctx := context.Background()
	if r, err := node.TryLock(ctx, "m/a", []byte("me"), time.Minute, kahuna.Ephemeral); err != nil || r.Status != kahuna.Locked {
		t.Fatalf("TryLock: %v %v", r, err)
	}
	if r, err := node.TryLock(ctx, "m/a", []byte("you"), time.Minute, kahuna.Ephemeral); err != nil || r.Status != kahuna.Busy {
		t.Fatalf("TryLock: %v %v", r, err)
	}
	if r, err := node.Unlock(ctx, "m/b", []byte("me"), kahuna.Persistent); err != nil || r.Status != kahuna.LockDoesNotExist {
		t.Fatalf("Unlock: %v %v", r, err)
	}
	if r, err := node.TryLock(ctx, "m/c", []byte("me"), time.Minute, kahuna.Persistent); err != nil || r.Status != kahuna.Locked {
		t.Fatalf("TryLock: %v %v", r, err)
	}
	m.observeWire(lease.Extend, lease.InvalidInput) // the API refused one
	m.observeWire(lease.Get, lease.Got)             // counted by the node, not here

	lines := scrape(t, m.handler())
	all := strings.Join(lines, "\n")
	for _, want := range []string{
		`kahuna_requests_total{durability="ephemeral",op="TryLock",status="Locked"} 1`,
		`kahuna_requests_total{durability="ephemeral",op="TryLock",status="Busy"} 1`,
		`kahuna_requests_total{durability="persistent",op="Unlock",status="LockDoesNotExist"} 1`,
		`kahuna_requests_total{durability="persistent",op="Get",status="Got"} 0`, // a success, there from the start
		`kahuna_request_duration_seconds_count{durability="ephemeral",op="TryLock",status="Busy"} 1`,
		`kahuna_request_duration_seconds_bucket{durability="ephemeral",op="TryLock",status="Locked",le="+Inf"} 1`,
		`kahuna_invalid_requests_total{op="Extend"} 1`,
		`kahuna_partition_leader{partition="0"} 1`,
		`kahuna_partition_leader{partition="1"} 1`,
		`kahuna_partition_serving{partition="1"} 1`,
		`kahuna_partition_leader_changes_total{partition="0"} 1`,
		`kahuna_forward_duration_seconds_count 0`,
		`kahuna_held_locks{durability="ephemeral"} 1`,
		`kahuna_build_info{goversion="go`,
		`go_goroutines `,
		`process_start_time_seconds `,
	} {
		if !strings.Contains(all, want) {
			t.Errorf("no %s", want)
		}
	}
	if !regexp.MustCompile(`(?m)^kahuna_partition_term\{partition="0"\} [1-9]`).MatchString(all) {
		t.Errorf("no term for partition 0")
	}
	// The persistent TryLock was one Raft entry, and took time in Raft.
	raft := map[string]float64{}
	for _, l := range lines {
		if name, v, ok := strings.Cut(l, " "); ok && strings.HasPrefix(name, "kahuna_raft_") {
			raft[name], _ = strconv.ParseFloat(v, 64)
		}
	}
	_, waited := raft["kahuna_raft_wait_seconds_total"]
	if raft["kahuna_raft_proposals_total"] != 1 || raft["kahuna_raft_commit_seconds_total"] <= 0 || !waited {
		t.Errorf("Raft series %v: want 1 proposal, its time in Raft, and the time it waited", raft)
	}
	if strings.Contains(all, `kahuna_invalid_requests_total{op="Get"}`) || strings.Contains(all, "kahuna_forwarded_requests_total") {
		t.Errorf("series that did not occur:\n%s", all)
	}
	// Only series that occurred, or an op's success: no op="Get",status="Extended".
	for _, l := range lines {
		mm := requestSeries.FindStringSubmatch(l)
		if mm == nil {
			if strings.HasPrefix(l, "kahuna_requests_total") {
				t.Errorf("unexpected labels: %s", l)
			}
			continue
		}
		op, status, value := mm[2], mm[3], mm[4]
		isSuccess := false
		for o, s := range success {
			isSuccess = isSuccess || o.String() == op && s.String() == status
		}
		if !isSuccess && value == "0" {
			t.Errorf("pre-filled series that never occurred: %s", l)
		}
	}
	if len(lines) > 300 {
		t.Errorf("%d sample lines; keep the series count small", len(lines))
	}
}

func TestShutdownLogsStoppedLast(t *testing.T) {
	t.Setenv("KAHUNA_HOME", t.TempDir())
	args := []string{"--http-ports", strconv.Itoa(testport.Port(t)), "--grpc-cleartext-ports", "", "--raft-port", strconv.Itoa(testport.Port(t))}
	ctx, cancel := context.WithCancel(context.Background())
	out, logs := newOutput(), newOutput()
	done := make(chan int, 1)
	go func() { done <- run(ctx, args, out, logs) }()
	select {
	case <-out.ready:
	case code := <-done:
		t.Fatalf("exited %d before ready: %s", code, logs.String())
	case <-time.After(60 * time.Second):
		t.Fatal("not ready after 60s")
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d", code)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if last := lines[len(lines)-1]; !strings.Contains(last, "level=INFO msg=stopped") {
		t.Errorf("last log line %q, want the stopped line; logs:\n%s", last, logs.String())
	}
	// dragonboat may warn of a starved process (late ticks) on a loaded
	// machine; kahuna itself warns of nothing, and election steps are not
	// warnings.
	for _, l := range lines {
		if strings.Contains(l, "level=DEBUG") || strings.Contains(l, "level=WARN") && !strings.Contains(l, "pkg=") || strings.Contains(l, "become follower") {
			t.Errorf("a clean start and stop at info: %s", l)
		}
	}
}
