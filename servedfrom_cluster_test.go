package kahuna_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/internal/testcluster"
)

// TestClusterServedFrom: ServedFrom is what Kahuna sends: "" when the node
// called served the request, the leader's client URL (its Endpoint) when
// the request was forwarded, on the Node, over REST and over gRPC (where
// the Go client names the endpoint it called for a "").
func TestClusterServedFrom(t *testing.T) {
	c := startCluster(t, 1, nil) // partition 0 led by node 1
	ctx := context.Background()
	leader := c.Member(1).Endpoint
	n1, n2, n3 := c.Node(1), c.Node(2), c.Node(3)
	const res = "served/from"
	owner := []byte("a")

	if r := testcluster.Settled(t, func() (kahuna.Result, error) { return n1.TryLock(ctx, res, owner, time.Minute, kahuna.Persistent) }); r.Status != kahuna.Locked || r.ServedFrom != "" {
		t.Fatalf("lock on the leader: %+v, want Locked served from \"\"", r)
	}
	if r := testcluster.Settled(t, func() (kahuna.Result, error) { return n2.Extend(ctx, res, owner, time.Minute, kahuna.Persistent) }); r.Status != kahuna.Extended || r.ServedFrom != leader {
		t.Fatalf("extend via node 2: %+v, want Extended served from %s", r, leader)
	}
	if r := testcluster.Settled(t, func() (kahuna.Result, error) {
		return n3.Lock(ctx, res, owner, time.Minute, time.Second, kahuna.Persistent)
	}); r.Status != kahuna.Locked || r.ServedFrom != leader {
		t.Fatalf("waiting lock via node 3: %+v, want Locked served from %s", r, leader)
	}

	// REST: the wire's own value. A MustRetry (the leader's lease not yet
	// confirmed, as under -race on a loaded machine) is retried, as the
	// Go client retries it.
	for id, want := range map[uint64]string{1: "", 2: leader} {
		var m map[string]any
		testcluster.Settled(t, func() (kahuna.Result, error) {
			m = restGetInfo(t, c.Member(id).Endpoint, res)
			status, _ := m["type"].(float64)
			return kahuna.Result{Status: kahuna.Status(status)}, nil
		})
		if got, ok := m["servedFrom"]; !ok || got != want {
			t.Fatalf("REST get-info via node %d: %v, want servedFrom %q", id, m, want)
		}
	}

	// A get-info of no live lock: only the type, as Kahuna answers, and
	// the leader's URL when forwarded, so a REST client can tell which
	// node answered (without it, it takes the answer as the called node's).
	missing := res + "-missing"
	for id, want := range map[uint64]string{1: "", 2: leader} {
		var m map[string]any
		testcluster.Settled(t, func() (kahuna.Result, error) {
			m = restGetInfo(t, c.Member(id).Endpoint, missing)
			status, _ := m["type"].(float64)
			return kahuna.Result{Status: kahuna.Status(status)}, nil
		})
		if got, ok := m["servedFrom"]; m["type"] != float64(kahuna.LockDoesNotExist) || (want == "" && ok) || (want != "" && got != want) {
			t.Fatalf("REST get-info of a missing lock via node %d: %v, want servedFrom %q", id, m, want)
		}
	}

	// gRPC through the Go client, on the shared port.
	for id := range uint64(3) {
		id++
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		kc, err := kahuna.Dial(dctx, []string{c.Member(id).Endpoint})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		r := testcluster.Settled(t, func() (kahuna.Result, error) {
			_, r, err := kc.Get(ctx, res, kahuna.Persistent)
			return r, err
		})
		kc.Close()
		if r.Status != kahuna.Got || r.ServedFrom != leader {
			t.Fatalf("gRPC get via node %d: %+v, want Got served from %s", id, r, leader)
		}
	}
}

// restGetInfo posts a persistent get-info for res to endpoint and returns
// the decoded answer.
func restGetInfo(t *testing.T, endpoint, res string) map[string]any {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"resource": res, "durability": int(kahuna.Persistent)})
	resp, err := http.Post(endpoint+"/v1/locks/get-info", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatalf("REST get-info via %s: %v", endpoint, err)
	}
	return m
}
