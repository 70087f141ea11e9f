package transport

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kahunago/kahuna/lease"
)

// TestRESTReason: an InvalidInput answer over REST has a "reason" next to
// "type" (lease.Check's words, never the resource itself), a valid answer
// has none and keeps Kahuna's shape, and a body that is not a request
// object keeps its HTTP 400 and error, with a reason too.
func TestRESTReason(t *testing.T) {
	f := newFake()
	srv := startServer(t, f, ServerOptions{})
	c := newREST(t, srv.mixed)
	owner := `"` + b64("A") + `"`
	long := strings.Repeat("r", 2000)
	for _, tc := range []struct {
		path, body, want string
	}{
		{"/v1/locks/try-lock", `{}`, "resource is empty"},
		{"/v1/locks/try-lock", `{"resource":"x","owner":` + owner + `,"durability":1}`, "ttl 0s is not positive"},
		{"/v1/locks/try-lock", `{"resource":"x","owner":` + owner + `,"expiresMs":-5,"durability":1}`, "ttl -5ms is not positive"},
		{"/v1/locks/try-extend", `{"resource":"x","expiresMs":1000,"durability":1}`, "owner is empty"},
		{"/v1/locks/try-extend", `{"resource":"x","lockId":` + owner + `,"expiresMs":1000,"durability":1}`, "owner is empty"},
		{"/v1/locks/try-unlock", `{"resource":"x","owner":` + owner + `,"durability":3}`, "durability 3 is unknown (0 ephemeral, 1 persistent)"},
		{"/v1/locks/try-lock", `{"resource":"` + long + `","owner":` + owner + `,"expiresMs":1000}`, "resource is 2000 bytes, over the limit of 1024"},
	} {
		m := c.post(tc.path, tc.body)
		if num(t, m, "type") != int64(lease.InvalidInput) || m["reason"] != tc.want {
			t.Errorf("%s %.80s = %v, want type 100 and reason %q", tc.path, tc.body, m, tc.want)
		}
		// Kahuna's fields are all still there.
		if want := []string{"fencingToken", "reason", "servedFrom", "type"}; !slices.Equal(keys(m), want) {
			t.Errorf("%s %.80s: keys %v, want %v", tc.path, tc.body, keys(m), want)
		}
	}
	m := c.post("/v1/locks/get-info", `{"durability":1}`)
	if !slices.Equal(keys(m), []string{"reason", "type"}) || num(t, m, "type") != 100 || m["reason"] != "resource is empty" {
		t.Errorf("get-info without resource = %v, want type 100 and reason", m)
	}
	if n := f.served.Load(); n != 0 {
		t.Fatalf("%d invalid requests reached the Locker", n)
	}

	// Valid answers: Kahuna's shape, no reason.
	m = c.post("/v1/locks/try-lock", `{"resource":"x","owner":`+owner+`,"expiresMs":60000,"durability":1}`)
	if !slices.Equal(keys(m), []string{"fencingToken", "servedFrom", "type"}) || num(t, m, "type") != int64(lease.Locked) {
		t.Errorf("valid try-lock = %v", m)
	}
	m = c.post("/v1/locks/try-lock", `{"resource":"x","owner":"`+b64("B")+`","expiresMs":60000,"durability":1}`)
	if _, ok := m["reason"]; ok || num(t, m, "type") != int64(lease.Busy) {
		t.Errorf("busy try-lock = %v, want Busy without a reason", m)
	}
	if m := c.post("/v1/locks/get-info", `{"resource":"nobody","durability":1}`); !slices.Equal(keys(m), []string{"type"}) {
		t.Errorf("get-info of no lock = %v, want only the type", m)
	}

	// Not a request object: 400 with an error, and a reason.
	for _, tc := range []struct{ name, body, want string }{
		{"malformed", `{"resource":"x",`, "malformed JSON at byte"},
		{"not an object", `[1]`, "body must be a JSON object"},
		{"wrong type", `{"resource":7}`, `field "resource": JSON number is not a valid value`},
		{"long number", `{"resource":"x","expiresMs":` + strings.Repeat("9", 5000) + `}`, `ttl more than 2562047h is over the limit of 596h31m23.647s`},
		{"ttl over int32", `{"resource":"x","expiresMs":2147483648}`, `ttl 596h31m23.648s is over the limit of 596h31m23.647s`},
		{"ttl not whole", `{"resource":"x","expiresMs":1.5}`, `field "expiresMs": JSON number 1.5 is not a valid value`},
	} {
		code, m := c.do(http.MethodPost, "/v1/locks/try-lock", "application/json", tc.body)
		reason, _ := m["reason"].(string)
		if code != http.StatusBadRequest || m["error"] == nil || !strings.HasPrefix(reason, tc.want) {
			t.Errorf("%s: %d %v, want 400 with an error and a reason starting %q", tc.name, code, m, tc.want)
		}
		if len(reason) > 200 {
			t.Errorf("%s: reason of %d bytes echoes the input: %.100s…", tc.name, len(reason), reason)
		}
	}
	// Errors that are not about the body have no reason: unchanged.
	code, m := c.do(http.MethodPost, "/v1/locks/try-lock", "text/plain", `{}`)
	if _, ok := m["reason"]; code != http.StatusUnsupportedMediaType || ok {
		t.Errorf("text/plain: %d %v, want 415 with only an error", code, m)
	}
}

// reasonLocker refuses every TryLock as InvalidInput with a reason of its
// own, as a node may for what a transport cannot check.
type reasonLocker struct{ *fakeLocker }

func (reasonLocker) TryLock(context.Context, string, []byte, time.Duration, lease.Durability) (lease.Result, error) {
	return lease.Result{Status: lease.InvalidInput, Reason: "the locker says no"}, nil
}

// TestClientReason: the Go clients give the reason of what they check
// themselves without a round trip; the REST client passes the server's
// reason on; Kahuna's gRPC wire carries none, so it is "" there.
func TestClientReason(t *testing.T) {
	srv := startServer(t, reasonLocker{newFake()}, ServerOptions{})
	gc := dial(t, []string{"http://" + srv.mixed})
	rc, err := DialREST([]string{"http://" + srv.mixed})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	ctx := testCtx(t)
	A := []byte("A")
	for name, l := range map[string]lease.Locker{"grpc": gc, "rest": rc} {
		for _, tc := range []struct {
			what string
			call func() (lease.Result, error)
			want string
		}{
			{"ttl over", func() (lease.Result, error) { return l.TryLock(ctx, "x", A, 1000*time.Hour, pers) },
				"ttl 1000h0m0s is over the limit of 596h31m23.647s"},
			{"extend ttl", func() (lease.Result, error) { return l.Extend(ctx, "x", A, 0, pers) }, "ttl 0s is not positive"},
			{"unlock owner", func() (lease.Result, error) { return l.Unlock(ctx, "x", nil, pers) }, "owner is empty"},
			{"get resource", func() (lease.Result, error) {
				_, r, err := l.Get(ctx, strings.Repeat("g", 1025), pers)
				return r, err
			}, "resource is 1025 bytes, over the limit of 1024"},
		} {
			r, err := tc.call()
			if err != nil || r.Status != lease.InvalidInput || r.Reason != tc.want {
				t.Errorf("%s %s: %+v %v, want InvalidInput with reason %q", name, tc.what, r, err, tc.want)
			}
		}
	}
	if r, err := gc.TryLock(ctx, "x\xff", A, time.Second, pers); err != nil || r.Status != lease.InvalidInput || r.Reason != "resource is not valid UTF-8" {
		t.Errorf("grpc non-UTF-8 resource: %+v %v", r, err)
	}
	// From the server: over REST with its reason, over gRPC without.
	if r, err := rc.TryLock(ctx, "x", A, time.Second, pers); err != nil || r.Status != lease.InvalidInput || r.Reason != "the locker says no" {
		t.Errorf("rest, the server's InvalidInput: %+v %v, want its reason", r, err)
	}
	if r, err := gc.TryLock(ctx, "x", A, time.Second, pers); err != nil || r.Status != lease.InvalidInput || r.Reason != "" {
		t.Errorf("grpc, the server's InvalidInput: %+v %v, want no reason (Kahuna's wire has none)", r, err)
	}
}
