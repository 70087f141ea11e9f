package node_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kahunago/kahuna/admin"
	"github.com/kahunago/kahuna/durability"
	"github.com/kahunago/kahuna/internal/node"
	"github.com/kahunago/kahuna/internal/testport"
	"github.com/kahunago/kahuna/lease"
)

// openNode opens a node that the test closes when it ends.
func openNode(t testing.TB, cfg node.Config) *node.Node {
	t.Helper()
	n, err := node.Open(cfg)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = n.Close() })
	return n
}

func TestPartitionCountIsBoundToDataDir(t *testing.T) {
	dir := t.TempDir()
	n, err := node.Open(node.Config{DataDir: dir, Partitions: 4, EphemeralFencingOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	n.Close()
	if _, err := node.Open(node.Config{DataDir: dir, Partitions: 8}); err == nil || !strings.Contains(err.Error(), "partitions=4") {
		t.Fatalf("reopen with another partition count: %v", err)
	}
}

// TestDefaultPartitions: a single node defaults to one partition, but a
// data dir created with another count keeps it when none is given (a node
// of an earlier version defaulted to 8), and keeps its locks.
func TestDefaultPartitions(t *testing.T) {
	ctx := context.Background()
	if n := openNode(t, node.Config{}); len(n.Status().Partitions) != node.DefaultSingleNodePartitions {
		t.Fatalf("single node: %d partitions, want %d", len(n.Status().Partitions), node.DefaultSingleNodePartitions)
	}

	dir := t.TempDir()
	n := openNode(t, node.Config{DataDir: dir, Partitions: 8})
	names := make([]string, 16) // spread over the 8 partitions
	for i := range names {
		names[i] = fmt.Sprintf("spread%d/lock", i)
		if r, err := n.TryLock(ctx, names[i], []byte("holder"), time.Hour, lease.Persistent); err != nil || r.Status != lease.Locked {
			t.Fatalf("%s: %v %v", names[i], r.Status, err)
		}
	}
	n.Close()
	n = openNode(t, node.Config{DataDir: dir})
	if got := len(n.Status().Partitions); got != 8 {
		t.Fatalf("reopened with no count: %d partitions, want the data dir's 8", got)
	}
	for _, name := range names {
		if r, err := n.TryLock(ctx, name, []byte("intruder"), time.Hour, lease.Persistent); err != nil || r.Status != lease.Busy {
			t.Fatalf("%s after reopening: %v %v, want Busy", name, r.Status, err)
		}
	}
	n.Close()

	if err := os.WriteFile(filepath.Join(dir, "kahuna-layout"), []byte("shards=3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := node.Open(node.Config{DataDir: dir}); err == nil || !strings.Contains(err.Error(), "not partitions=N") {
		t.Fatalf("unreadable layout: %v", err)
	}
}

func TestInvalidConfig(t *testing.T) {
	for _, cfg := range []node.Config{{Partitions: -1}, {LockActors: -2}, {CacheEntryTTL: -time.Second}, {WALDir: "/tmp/x"}, {RaftRTT: time.Microsecond}, {RaftRTT: 2 * time.Second}, {RaftRTT: 1500 * time.Microsecond}} {
		if _, err := node.Open(cfg); err == nil {
			t.Errorf("Open(%+v) succeeded", cfg)
		}
	}
}

// A second node on a data dir in use is refused, naming the process that
// has it, and the dir and the first node are untouched; once the first
// closes, the dir opens again.
func TestDataDirInUseRefused(t *testing.T) {
	dir := t.TempDir()
	first, err := node.Open(node.Config{DataDir: dir, EphemeralFencingOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if r, err := first.TryLock(ctx, "dir/a", []byte("o"), time.Minute, lease.Persistent); err != nil || r.Status != lease.Locked {
		t.Fatalf("lock: %+v %v", r, err)
	}
	_, err = node.Open(node.Config{DataDir: dir, EphemeralFencingOnly: true})
	if !errors.Is(err, node.ErrDataDirInUse) || !strings.Contains(err.Error(), fmt.Sprintf("(pid %d)", os.Getpid())) {
		t.Fatalf("second node on %s: %v, want ErrDataDirInUse naming pid %d", dir, err, os.Getpid())
	}
	if _, r, err := first.Get(ctx, "dir/a", lease.Persistent); err != nil || r.Status != lease.Got {
		t.Fatalf("the first node after the refused second: %+v %v", r, err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	again := openNode(t, node.Config{DataDir: dir, EphemeralFencingOnly: true})
	if info, r, err := again.Get(ctx, "dir/a", lease.Persistent); err != nil || r.Status != lease.Got || string(info.Owner) != "o" {
		t.Fatalf("reopened: %+v %+v %v", info, r, err)
	}
}

// A member started while the others are down says what it waits for
// while it waits, and its start fails naming the members it could not
// reach.
func TestStartAloneSaysWhatItWaitsFor(t *testing.T) {
	self := testport.Listen(t)
	members := map[uint64]admin.Member{
		1: {RaftAddress: self.Addr().String(), Endpoint: "http://127.0.0.1:1"},
		2: {RaftAddress: testport.Addr(t), Endpoint: "http://127.0.0.1:2"},
		3: {RaftAddress: testport.Addr(t), Endpoint: "http://127.0.0.1:3"},
	}
	var logs syncBuffer
	_, err := node.Open(node.Config{
		NodeID: 1, Members: members, RaftAddress: members[1].RaftAddress, RaftListener: self,
		DataDir: t.TempDir(), Partitions: 2, StartTimeout: 1500 * time.Millisecond,
		InitialClusterState: durability.ClusterStateNew,
		Logger:              slog.New(slog.NewTextHandler(&logs, nil)),
	})
	want := fmt.Sprintf("2 of 2 partitions without a leader; members not reachable: 2 at %s, 3 at %s", members[2].RaftAddress, members[3].RaftAddress)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("start alone: %v, want an error saying %q", err, want)
	}
	if !strings.Contains(logs.String(), `msg="starting: waiting for the cluster" waiting_for="`+want) {
		t.Fatalf("no line saying what the node waits for while it waited:\n%s", logs.String())
	}
}

// syncBuffer is a bytes.Buffer safe for a logger's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A starting member serves its API while it waits: /healthz answers 503
// with what it waits for, its status says so, and lock calls MustRetry.
func TestStartServesWhileWaiting(t *testing.T) {
	self := testport.Listen(t)
	members := map[uint64]admin.Member{
		1: {RaftAddress: self.Addr().String(), Endpoint: "http://127.0.0.1:1"},
		2: {RaftAddress: testport.Addr(t), Endpoint: "http://127.0.0.1:2"},
		3: {RaftAddress: testport.Addr(t), Endpoint: "http://127.0.0.1:3"},
	}
	n, err := node.Start(node.Config{
		NodeID: 1, Members: members, RaftAddress: members[1].RaftAddress, RaftListener: self,
		DataDir: t.TempDir(), Partitions: 2, ListenAddress: "127.0.0.1:0",
		InitialClusterState: durability.ClusterStateNew,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	want := "2 of 2 partitions without a leader; members not reachable: 2 at " + members[2].RaftAddress
	resp, err := http.Get("http://" + n.ListenAddress() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.HasPrefix(string(body), "starting: "+want) {
		t.Fatalf("/healthz while starting: %d %q, want 503 saying %q", resp.StatusCode, body, want)
	}
	if st := n.Status(); st.Healthy || !strings.HasPrefix(st.Starting, want) {
		t.Fatalf("status while starting: healthy %v, starting %q", st.Healthy, st.Starting)
	}
	if r, err := n.TryLock(context.Background(), "a", []byte("o"), time.Minute, lease.Persistent); err != nil || r.Status != lease.MustRetry {
		t.Fatalf("TryLock while starting: %+v %v, want MustRetry", r, err)
	}
	if ready, _ := n.Ready(); ready {
		t.Fatal("Ready before WaitReady")
	}
}
