package kahuna_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/transport"
)

// A bad token is refused at once, and says so: Acquire does not retry it
// as an unknown outcome until its budget runs out (it used to end 30 s
// later with "context deadline exceeded"), over gRPC and over REST.
func TestBadTokenIsRefusedNotRetried(t *testing.T) {
	tokens, err := transport.NewTokens("secret1")
	if err != nil {
		t.Fatal(err)
	}
	n := openNode(t, kahuna.Config{ListenAddress: "127.0.0.1:0", AuthTokens: tokens})
	for _, rest := range []bool{false, true} {
		opts := []kahuna.ClientOption{kahuna.WithToken("wrong")}
		if rest {
			opts = append(opts, kahuna.WithREST())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		c, err := kahuna.Dial(ctx, []string{"http://" + n.ListenAddress()}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.TryLock(ctx, "auth/r", []byte("o"), time.Minute, kahuna.Persistent); !errors.Is(err, kahuna.ErrUnauthenticated) {
			t.Errorf("rest=%v: TryLock with a bad token: %v, want ErrUnauthenticated", rest, err)
		}
		if _, err := kahuna.Acquire(ctx, c, "auth/r", kahuna.WithWait(time.Second)); !errors.Is(err, kahuna.ErrUnauthenticated) || ctx.Err() != nil {
			t.Errorf("rest=%v: Acquire with a bad token: %v (ctx %v), want ErrUnauthenticated at once", rest, err, ctx.Err())
		}
		cancel()
		c.Close()
	}
	// The right token still works.
	c := dialWith(t, "http://"+n.ListenAddress(), kahuna.WithToken("secret1"))
	if r, err := c.TryLock(context.Background(), "auth/r", []byte("o"), time.Minute, kahuna.Persistent); err != nil || r.Status != kahuna.Locked {
		t.Fatalf("TryLock with the token: %+v %v", r, err)
	}
}

func dialWith(t *testing.T, endpoint string, opts ...kahuna.ClientOption) *kahuna.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := kahuna.Dial(ctx, []string{endpoint}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
