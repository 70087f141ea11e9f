package httpfence_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/kahunago/kahuna/fence"
	"github.com/kahunago/kahuna/fence/httpfence"
)

func TestClient(t *testing.T) {
	var got atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.Header.Values(httpfence.Header))
	}))
	defer srv.Close()
	seen := func() []string { v, _ := got.Load().([]string); return v }

	tok := fence.Token{Lock: "orders/42", Slot: "w", Value: 9}
	c := httpfence.WithFence(nil, tok)
	req, _ := http.NewRequest(http.MethodPut, srv.URL, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if s := seen(); len(s) != 1 || s[0] != "lock=orders/42; token=9; slot=w" {
		t.Fatalf("server saw %q", s)
	}
	if req.Header.Get(httpfence.Header) != "" {
		t.Fatal("WithFence changed the caller's request")
	}
	if http.DefaultClient.Transport != nil {
		t.Fatal("WithFence changed http.DefaultClient")
	}

	// One client, the token from each request's context; none, no header.
	c = &http.Client{Transport: httpfence.NewTransport(nil)}
	for _, tc := range []struct {
		ctx  context.Context
		want []string
	}{
		{httpfence.ContextWithToken(context.Background(), fence.Token{Lock: "a", Value: 1}), []string{"lock=a; token=1"}},
		{context.Background(), nil},
	} {
		req, _ := http.NewRequestWithContext(tc.ctx, http.MethodPut, srv.URL, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if s := seen(); len(s) != len(tc.want) || (len(s) == 1 && s[0] != tc.want[0]) {
			t.Fatalf("server saw %q, want %q", s, tc.want)
		}
	}

	// An invalid token is not sent.
	got.Store([]string{"untouched"})
	_, err = httpfence.WithFence(nil, fence.Token{Lock: "", Value: 1}).Get(srv.URL)
	if !errors.Is(err, fence.ErrInvalid) || seen()[0] != "untouched" {
		t.Fatalf("invalid token: %v, server saw %q", err, seen())
	}
}

func TestStaleFromAnswer(t *testing.T) {
	store := fence.NewMemoryStore()
	srv := httptest.NewServer(httpfence.Handler(store, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	defer srv.Close()
	for _, v := range []uint64{8, 6} {
		tok := fence.Token{Lock: "l", Value: v}
		resp, err := httpfence.WithFence(srv.Client(), tok).Post(srv.URL, "text/plain", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		stale := httpfence.Stale(resp, "svc", tok)
		if v == 8 && stale != nil {
			t.Fatalf("token 8: %v", stale)
		}
		if v == 6 && (stale == nil || stale.Current != 8 || !errors.Is(stale, fence.ErrStale)) {
			t.Fatalf("token 6: %v (status %d)", stale, resp.StatusCode)
		}
	}
}
