package kahuna_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
)

// A semaphore over REST: the Client takes and fences permits as over
// gRPC, and a program in any language posts try-lock with permits and
// limit and reads each permit's slot and token from the answer's grants.
func TestSemaphoreOverREST(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := openNode(t, kahuna.Config{ListenAddress: "127.0.0.1:0"})
	ep := "http://" + n.ListenAddress()
	rest, err := kahuna.Dial(ctx, []string{ep}, kahuna.WithREST())
	if err != nil {
		t.Fatal(err)
	}
	defer rest.Close()

	sem := kahuna.NewSemaphore(rest, "builds", 2)
	p, err := sem.TryAcquire(ctx, 1, kahuna.WithTTL(time.Minute))
	if err != nil {
		t.Fatalf("a permit over REST: %v", err)
	}
	if g := p.Grants(); len(g) != 1 || g[0].Token != p.FencingToken() || p.Free() != 1 {
		t.Fatalf("grants over REST: %+v, token %d, %d left free", g, p.FencingToken(), p.Free())
	}

	type grant struct {
		Slot         int   `json:"slot"`
		FencingToken int64 `json:"fencingToken"`
	}
	type reply struct {
		Type         kahuna.Status `json:"type"`
		FencingToken int64         `json:"fencingToken"`
		Reason       string        `json:"reason"`
		Grants       []grant       `json:"grants"`
		PermitsFree  *int          `json:"permitsFree"`
	}
	post := func(path string, body map[string]any) reply {
		t.Helper()
		b, _ := json.Marshal(body)
		resp, err := http.Post(ep+path, "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var r reply
		if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &r) != nil {
			t.Fatalf("%s %s: %d %s", path, b, resp.StatusCode, raw)
		}
		return r
	}
	owner := []byte("curl")
	lock := map[string]any{"resource": kahuna.SemaphorePrefix + "builds", "owner": owner, "expiresMs": 60000, "durability": int(kahuna.Persistent), "permits": 1, "limit": 2}
	r := post("/v1/locks/try-lock", lock)
	if r.Type != kahuna.Locked || len(r.Grants) != 1 || r.Grants[0].Slot == p.Grants()[0].Slot || r.FencingToken != r.Grants[0].FencingToken ||
		r.PermitsFree == nil || *r.PermitsFree != 0 {
		t.Fatalf("the second permit over raw REST: %+v (the first's %+v)", r, p.Grants())
	}
	if _, err := sem.TryAcquire(ctx, 1); !errors.Is(err, kahuna.ErrBusy) {
		t.Fatalf("a third permit of two: %v, want busy", err)
	}

	// Bad input changes nothing: another limit, more permits than the
	// limit, permits on a plain lock's name.
	for _, bad := range []map[string]any{
		{"resource": kahuna.SemaphorePrefix + "builds", "owner": []byte("x"), "expiresMs": 1000, "durability": 1, "permits": 1, "limit": 3},
		{"resource": kahuna.SemaphorePrefix + "builds", "owner": []byte("x"), "expiresMs": 1000, "durability": 1, "permits": 3, "limit": 2},
		{"resource": "plain", "owner": []byte("x"), "expiresMs": 1000, "durability": 1, "permits": 1, "limit": 2},
	} {
		if r := post("/v1/locks/try-lock", bad); r.Type != kahuna.InvalidInput || r.Reason == "" {
			t.Fatalf("%v: %+v, want InvalidInput with a reason", bad, r)
		}
	}

	// The raw holder lets go with a plain try-unlock; the Client's next
	// permit takes the freed slot with a higher token.
	if r := post("/v1/locks/try-unlock", map[string]any{"resource": kahuna.SemaphorePrefix + "builds", "owner": owner, "durability": 1}); r.Type != kahuna.Unlocked {
		t.Fatalf("try-unlock of a permit: %+v", r)
	}
	q, err := sem.TryAcquire(ctx, 1, kahuna.WithTTL(time.Minute))
	if err != nil {
		t.Fatalf("a permit freed over REST: %v", err)
	}
	if g := q.Grants()[0]; g.Slot != r.Grants[0].Slot || g.Token <= r.Grants[0].FencingToken {
		t.Fatalf("the freed slot again: %+v after %+v", g, r.Grants[0])
	}
	for _, h := range []*kahuna.Permit{p, q} {
		if err := h.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
