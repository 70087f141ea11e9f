package main

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
)

// startNode serves an ephemeral node's wire API on loopback for the test.
func startNode(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n, err := kahuna.Open(kahuna.Config{Listener: ln, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	return "http://" + ln.Addr().String()
}

// Every client takes a lock, is refused it while another owner holds it
// (a Busy answer is a lock outcome, not an error), and releases it; the
// node then holds nothing.
func TestClientsLockAndUnlock(t *testing.T) {
	url := startNode(t)
	ctx := context.Background()
	probe, err := newClient("kahuna", url, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer probe.close()
	for _, name := range []string{"kahuna", "nethttp", "fasthttp"} {
		t.Run(name, func(t *testing.T) {
			c, err := newClient(name, url, 4)
			if err != nil {
				t.Fatal(err)
			}
			defer c.close()
			if err := c.lock(ctx, 7, []byte("a")); err != nil {
				t.Fatal(err)
			}
			held := probe.(kahunaClient)
			res, err := held.c.TryLock(ctx, keyName(7), []byte("b"), time.Second, 0)
			if err != nil || res.Status.String() != "Busy" {
				t.Fatalf("another owner's try-lock after %s locked: %v, %v; want Busy", name, res.Status, err)
			}
			if err := c.unlock(ctx, 7, []byte("a")); err != nil {
				t.Fatal(err)
			}
			res, err = held.c.TryLock(ctx, keyName(7), []byte("b"), time.Second, 0)
			if err != nil || res.Status.String() != "Locked" {
				t.Fatalf("another owner's try-lock after %s unlocked: %v, %v; want Locked", name, res.Status, err)
			}
			if _, err := held.c.Unlock(ctx, keyName(7), []byte("b"), 0); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A run counts requests and CPU; a node that is not there fails it.
func TestMeasure(t *testing.T) {
	url := startNode(t)
	c, err := newClient("nethttp", url, 2)
	if err != nil {
		t.Fatal(err)
	}
	res, err := measure(c, 2, 200*time.Millisecond, 50*time.Millisecond)
	c.close()
	if err != nil || res.perSecond <= 0 || res.cpuPerRequest <= 0 {
		t.Fatalf("measure: %+v, %v", res, err)
	}
	gone, err := newClient("fasthttp", "http://127.0.0.1:1", 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := measure(gone, 2, 100*time.Millisecond, 10*time.Millisecond); err == nil {
		t.Fatal("measure against no node: no error")
	}
	if _, err := newClient("curl", url, 1); err == nil || !strings.Contains(err.Error(), "unknown client") {
		t.Fatalf("unknown client: %v", err)
	}
}
