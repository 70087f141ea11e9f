package kahuna_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
)

// CheckToken is true only for the live holder's token, on a node and on a
// client over gRPC and REST, for both durabilities; a superseded token, a
// released lock and a negative token are not valid.
func TestCheckToken(t *testing.T) {
	n := openNode(t, kahuna.Config{ListenAddress: "127.0.0.1:0"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ep := "http://" + n.ListenAddress()
	grpcClient, err := kahuna.Dial(ctx, []string{ep})
	if err != nil {
		t.Fatal(err)
	}
	defer grpcClient.Close()
	restClient, err := kahuna.Dial(ctx, []string{ep}, kahuna.WithREST())
	if err != nil {
		t.Fatal(err)
	}
	defer restClient.Close()
	for _, d := range durabilities {
		for name, l := range map[string]kahuna.Locker{"node": n, "grpc": grpcClient, "rest": restClient} {
			res := "check/" + d.String() + "/" + name
			c, err := kahuna.CheckToken(ctx, l, res, 0, d)
			if err != nil || c.Valid || c.Current != -1 {
				t.Fatalf("%s %v: no lock: %+v, %v", name, d, c, err)
			}
			a, err := kahuna.Acquire(ctx, l, res, kahuna.WithDurability(d), kahuna.WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			if c, err := kahuna.CheckToken(ctx, l, res, a.FencingToken(), d); err != nil || !c.Valid || c.Current != a.FencingToken() || c.Expires.IsZero() {
				t.Fatalf("%s %v: the holder's token: %+v, %v", name, d, c, err)
			}
			if err := a.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			b, err := kahuna.Acquire(ctx, l, res, kahuna.WithDurability(d), kahuna.WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			if c, err := kahuna.CheckToken(ctx, l, res, a.FencingToken(), d); err != nil || c.Valid || c.Current != b.FencingToken() {
				t.Fatalf("%s %v: a superseded token: %+v, %v (holder's %d)", name, d, c, err, b.FencingToken())
			}
			if err := b.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if c, err := kahuna.CheckToken(ctx, l, res, b.FencingToken(), d); err != nil || c.Valid || c.Current != -1 {
				t.Fatalf("%s %v: a released lock's token: %+v, %v", name, d, c, err)
			}
		}
	}
	var se *kahuna.StatusError
	if _, err := kahuna.CheckToken(ctx, n, "check/x", -1, kahuna.Persistent); !errors.As(err, &se) || se.Status != kahuna.InvalidInput {
		t.Fatalf("negative token: %v, want InvalidInput", err)
	}

	// The REST route, as a resource written in any language calls it.
	l, err := kahuna.Acquire(ctx, n, "check/rest", kahuna.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]any{"resource": "check/rest", "fencingToken": l.FencingToken(), "durability": int(kahuna.Persistent)})
	resp, err := http.Post(ep+"/v1/locks/check-token", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || resp.StatusCode != http.StatusOK || m["valid"] != true || m["fencingToken"] != float64(l.FencingToken()) {
		t.Fatalf("REST check-token: %d %v %v", resp.StatusCode, m, err)
	}
}
