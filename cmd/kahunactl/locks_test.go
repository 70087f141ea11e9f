package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
)

// kahunactl locks PREFIX prints the live locks under PREFIX as a table or
// JSON, a page at a time with the next page's cursor; bad input is a
// usage error (exit 2) that asks nothing of the node.
func TestLocks(t *testing.T) {
	n, ep := startNode(t)
	ctx := context.Background()
	lock := func(res string, d kahuna.Durability) int64 {
		t.Helper()
		r, err := n.TryLock(ctx, res, []byte("o-"+res), time.Hour, d)
		if err != nil || r.Status != kahuna.Locked {
			t.Fatalf("lock %s: %+v %v", res, r, err)
		}
		return r.FencingToken
	}
	lock("app/a", kahuna.Ephemeral)
	lock("app/b", kahuna.Persistent)
	lock("app/c", kahuna.Persistent)
	if r, err := n.Unlock(ctx, "app/c", []byte("o-app/c"), kahuna.Persistent); err != nil || r.Status != kahuna.Unlocked {
		t.Fatalf("unlock app/c: %+v %v", r, err)
	}
	lock("apps/x", kahuna.Ephemeral)

	r := ctl(t, "locks", "app/", "--endpoints", ep).want(t, exitOK, "locks app/")
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "RESOURCE") || !strings.HasPrefix(lines[1], "app/a ") || !strings.HasPrefix(lines[2], "app/b ") ||
		!strings.Contains(lines[1], "o-app/a") || !strings.Contains(lines[1], "Ephemeral") || !strings.Contains(lines[2], "Persistent") {
		t.Fatalf("locks app/: %s", r)
	}

	r = ctl(t, "locks", "--format", "json", "app/", "--endpoints", ep).want(t, exitOK, "locks app/ json")
	var v struct {
		Locks []map[string]any `json:"locks"`
		Next  *string          `json:"next"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || len(v.Locks) != 2 || v.Next != nil {
		t.Fatalf("json: %v %s", err, r)
	}
	b := v.Locks[1]
	if b["resource"] != "app/b" || b["owner"] != "o-app/b" || b["durability"] != "Persistent" || b["fencingToken"] != float64(0) {
		t.Fatalf("json lock: %v", b)
	}
	if exp, err := time.Parse(time.RFC3339Nano, b["expires"].(string)); err != nil || time.Until(exp) < 50*time.Minute {
		t.Fatalf("json expires: %v %v", b["expires"], err)
	}

	// Pages of one, by the cursor printed.
	r = ctl(t, "locks", "app/", "--limit", "1", "--format", "table", "--endpoints", ep).want(t, exitOK, "first page")
	if !strings.Contains(r.stdout, "\napp/a ") || strings.Contains(r.stdout, "app/b") || !strings.Contains(r.stdout, `--after "app/a"`) {
		t.Fatalf("first page: %s", r)
	}
	r = ctl(t, "locks", "app/", "--limit", "1", "--after", "app/a", "--endpoints", ep).want(t, exitOK, "second page")
	if !strings.Contains(r.stdout, "\napp/b ") || strings.Contains(r.stdout, "app/a ") || strings.Contains(r.stdout, "more after") {
		t.Fatalf("second page: %s", r)
	}
	// No prefix: every lock.
	r = ctl(t, "locks", "--endpoints", ep, "--format", "json").want(t, exitOK, "every lock")
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || len(v.Locks) != 3 || v.Locks[2]["resource"] != "apps/x" {
		t.Fatalf("every lock: %v %s", err, r)
	}

	for _, c := range []struct {
		args []string
		why  string
	}{
		{[]string{"--limit", "0"}, "--limit must be 1 to 1000"},
		{[]string{"--limit", "1001"}, "over the limit of 1000"},
		{[]string{"--limit", "-1"}, "negative"},
		{[]string{"--limit", "x"}, "--limit"},
		{[]string{strings.Repeat("p", kahuna.MaxResourceBytes+1)}, "prefix is 1025 bytes"},
		{[]string{"--after", strings.Repeat("p", kahuna.MaxResourceBytes+1)}, "after is 1025 bytes"},
		{[]string{"a", "b"}, "unexpected argument"},
		{[]string{"--format", "yaml"}, "--format"},
	} {
		r := ctl(t, append([]string{"locks", "--endpoints", ep}, c.args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, c.why) || r.stdout != "" {
			t.Errorf("locks %.40q: %s, want exit 2 saying %q", c.args, r, c.why)
		}
	}
	// An endpoint that does not answer is an error, exit 1.
	ctl(t, "locks", "--endpoints", closedEndpoint(t), "--timeout", "2s").want(t, exitError, "unreachable")
}

// A semaphore's listing row counts its holders, and a line per permit
// below it names the slot, owner and token; JSON has them as holders.
func TestLocksShowsSemaphoreHolders(t *testing.T) {
	_, ep := startNode(t)
	for _, owner := range []string{"w1", "w2"} {
		ctl(t, "semaphore", "pool", "--limit", "3", "--owner", owner, "--ttl", "1m", "--endpoints", ep).want(t, exitOK, "permit of "+owner)
	}
	r := ctl(t, "locks", "semaphore:", "--endpoints", ep).want(t, exitOK, "locks semaphore:")
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[1], "semaphore:pool ") || !strings.Contains(lines[1], "(2 holders)") ||
		!strings.HasPrefix(lines[2], "  slot 0") || !strings.Contains(lines[2], "w1") || !strings.HasPrefix(lines[3], "  slot 1") || !strings.Contains(lines[3], "w2") {
		t.Fatalf("locks semaphore: %s", r)
	}
	r = ctl(t, "locks", "semaphore:", "--format", "json", "--endpoints", ep).want(t, exitOK, "locks semaphore: as JSON")
	var got struct {
		Locks []struct {
			Holders []struct {
				Slot         int    `json:"slot"`
				Owner        string `json:"owner"`
				FencingToken int64  `json:"fencingToken"`
			} `json:"holders"`
		} `json:"locks"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || len(got.Locks) != 1 || len(got.Locks[0].Holders) != 2 ||
		got.Locks[0].Holders[1].Owner != "w2" || got.Locks[0].Holders[1].Slot != 1 || got.Locks[0].Holders[1].FencingToken != 1 {
		t.Fatalf("as JSON: %s (%v)", r, err)
	}
}

// get of a semaphore prints each holder, as locks does; JSON lists them.
func TestGetShowsSemaphoreHolders(t *testing.T) {
	_, ep := startNode(t)
	ctl(t, "get", "semaphore:pool", "--endpoints", ep).want(t, exitLost, "get of a semaphore never taken")
	for _, owner := range []string{"w1", "w2"} {
		ctl(t, "semaphore", "pool", "--limit", "3", "--owner", owner, "--ttl", "1m", "--endpoints", ep).want(t, exitOK, "permit of "+owner)
	}
	r := ctl(t, "get", "semaphore:pool", "--endpoints", ep).want(t, exitOK, "get semaphore:pool")
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "semaphore:pool held by 2, fencing token 1") ||
		!strings.HasPrefix(lines[1], "  slot 0") || !strings.Contains(lines[1], "w1") || !strings.HasPrefix(lines[2], "  slot 1") || !strings.Contains(lines[2], "w2") {
		t.Fatalf("get semaphore:pool: %s", r)
	}
	r = ctl(t, "get", "semaphore:pool", "--format", "json", "--endpoints", ep).want(t, exitOK, "get as JSON")
	var got struct {
		Status  string `json:"status"`
		Holders []struct {
			Slot  int    `json:"slot"`
			Owner string `json:"owner"`
		} `json:"holders"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || got.Status != "Got" || len(got.Holders) != 2 || got.Holders[1].Owner != "w2" || got.Holders[1].Slot != 1 {
		t.Fatalf("as JSON: %s (%v)", r, err)
	}
}
