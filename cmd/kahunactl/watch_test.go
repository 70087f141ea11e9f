package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
)

// kahunactl watch prints one JSON line per change, as it happens, and
// exits 0 when interrupted (here: its context ends).
func TestWatchPrintsChanges(t *testing.T) {
	n, endpoint := startNode(t)
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	var stderr strings.Builder
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"watch", "jobs/export", "--endpoints", endpoint, "--format", "json"}, pw, &stderr)
		pw.Close()
	}()
	lines := bufio.NewScanner(pr)
	next := func() map[string]any {
		t.Helper()
		if !lines.Scan() {
			t.Fatalf("watch output ended: %v; stderr %s", lines.Err(), stderr.String())
		}
		var m map[string]any
		if err := json.Unmarshal(lines.Bytes(), &m); err != nil {
			t.Fatalf("%q: %v", lines.Text(), err)
		}
		return m
	}
	if m := next(); m["event"] != "released" || m["current"] != true {
		t.Fatalf("first line %v, want the current state", m)
	}
	n.TryLock(ctx, "jobs/export", []byte("me"), time.Minute, kahuna.Persistent)
	if m := next(); m["event"] != "acquired" || m["owner"] != "me" || m["durability"] != "Persistent" {
		t.Fatalf("after the grant: %v", m)
	}
	n.Unlock(ctx, "jobs/export", []byte("me"), kahuna.Persistent)
	if m := next(); m["event"] != "released" || m["current"] != false {
		t.Fatalf("after the release: %v", m)
	}
	cancel()
	go io.Copy(io.Discard, pr) //nolint:errcheck // drain
	if c := <-code; c != exitOK {
		t.Fatalf("exit %d after interrupt, want 0", c)
	}
}

func TestWatchTextLine(t *testing.T) {
	var b strings.Builder
	printEvent(printer{w: &b}, "r", kahuna.WatchEvent{Kind: kahuna.EventAcquired, Owner: []byte("o"), FencingToken: 3, Revision: 7, Expires: time.UnixMilli(0)})
	if want := "r acquired by o, fencing token 3, expires 1970-01-01T00:00:00Z, revision 7, Ephemeral\n"; b.String() != want {
		t.Fatalf("%q, want %q", b.String(), want)
	}
}

// A semaphore's event says what happened and how many hold it, then a
// row per holder; its JSON carries them.
func TestWatchSemaphoreLines(t *testing.T) {
	ev := kahuna.WatchEvent{Kind: kahuna.EventExpired, FencingToken: 4, Revision: 9, Holders: []kahuna.Holder{
		{Slot: 1, Owner: []byte("w1"), FencingToken: 4, Expires: time.UnixMilli(0)}}}
	var b strings.Builder
	printEvent(printer{w: &b}, "semaphore:pool", ev)
	want := "semaphore:pool expired, 1 held, fencing token 4, revision 9\n  slot 1  w1  4  1970-01-01T00:00:00Z\n"
	if b.String() != want {
		t.Fatalf("%q, want %q", b.String(), want)
	}
	b.Reset()
	printEvent(printer{w: &b, json: true}, "semaphore:pool", ev)
	var m struct {
		Event   string `json:"event"`
		Holders []struct {
			Slot  int    `json:"slot"`
			Owner string `json:"owner"`
		} `json:"holders"`
	}
	if err := json.Unmarshal([]byte(b.String()), &m); err != nil || m.Event != "expired" || len(m.Holders) != 1 || m.Holders[0].Owner != "w1" || m.Holders[0].Slot != 1 {
		t.Fatalf("JSON %q: %+v %v", b.String(), m, err)
	}
}
