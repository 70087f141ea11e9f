package httpfence_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	_ "modernc.org/sqlite"

	"github.com/kahunago/kahuna/fence"
	"github.com/kahunago/kahuna/fence/httpfence"
	"github.com/kahunago/kahuna/fence/internal/fencetest"
	"github.com/kahunago/kahuna/fence/sqlfence"
)

// valueService is a service with one value, written by PUT, whose handler
// records how often it ran.
type valueService struct {
	value string
	calls atomic.Int64
}

func (s *valueService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.calls.Add(1)
	b, _ := io.ReadAll(r.Body)
	if string(b) == "fail" {
		http.Error(w, "cannot store that", http.StatusUnprocessableEntity)
		return
	}
	s.value = string(b)
	w.Header().Set("X-Stored", "yes")
	fmt.Fprint(w, "stored")
}

type answer struct {
	status int
	header http.Header
	body   map[string]any
	text   string
}

func put(t *testing.T, h http.Handler, fenceHeader []string, value string) answer {
	t.Helper()
	req := httptest.NewRequest(http.MethodPut, "/value", strings.NewReader(value))
	for _, v := range fenceHeader {
		req.Header.Add(httpfence.Header, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	a := answer{status: rec.Code, header: rec.Header(), text: rec.Body.String()}
	if rec.Header().Get("Content-Type") == "application/json" {
		if err := json.Unmarshal(rec.Body.Bytes(), &a.body); err != nil {
			t.Fatalf("body %q: %v", rec.Body.String(), err)
		}
	}
	return a
}

func hdr(lock string, tok uint64) []string {
	return []string{httpfence.FormatHeader(fence.Token{Lock: lock, Value: tok})}
}

func TestMiddleware(t *testing.T) {
	store := fence.NewMemoryStore()
	svc := &valueService{}
	h := httpfence.Handler(store, svc)

	a := put(t, h, hdr("orders/42", 5), "five")
	if a.status != 200 || a.text != "stored" || a.header.Get("X-Stored") != "yes" || svc.value != "five" {
		t.Fatalf("token 5: %+v, value %q", a, svc.value)
	}
	if a := put(t, h, hdr("orders/42", 5), "five again"); a.status != 200 || svc.value != "five again" {
		t.Fatalf("token 5 again: %+v", a)
	}
	a = put(t, h, hdr("orders/42", 4), "stale")
	if a.status != http.StatusConflict || a.header.Get(httpfence.CurrentHeader) != "5" ||
		a.body["current"] != 5.0 || a.body["token"] != 4.0 || a.body["error"] != "stale fencing token" {
		t.Fatalf("token 4: %+v", a)
	}
	if svc.value != "five again" || svc.calls.Load() != 2 {
		t.Fatalf("stale write reached the handler: value %q, %d calls", svc.value, svc.calls.Load())
	}
	// A slot has a mark of its own.
	if a := put(t, h, []string{"lock=orders/42; token=1; slot=read"}, "slot"); a.status != 200 {
		t.Fatalf("slot: %+v", a)
	}
}

// TestMiddlewareBadInput: nothing reaches the handler, no mark is set.
func TestMiddlewareBadInput(t *testing.T) {
	store := fence.NewMemoryStore()
	svc := &valueService{}
	h := httpfence.Handler(store, svc)
	long := strings.Repeat("x", fence.MaxNameLen+1)
	for _, tc := range []struct {
		header []string
		status int
		reason string
	}{
		{nil, http.StatusPreconditionRequired, ""},
		{[]string{"lock=a; token=x"}, 400, `token "x" is not a decimal number`},
		{[]string{"lock=a; token=-3"}, 400, `token "-3" is negative`},
		{[]string{"lock=" + long + "; token=1"}, 400, "lock name is 1025 bytes, over the limit of 1024"},
		{[]string{"token=1"}, 400, "no lock field"},
		{[]string{"lock=a; token=1", "lock=a; token=2"}, 400, "given more than once"},
	} {
		a := put(t, h, tc.header, "bad")
		if a.status != tc.status || a.body["reason"] != nilIfEmpty(tc.reason) {
			t.Errorf("%.50q: %d %v, want %d with reason %q", tc.header, a.status, a.body, tc.status, tc.reason)
		}
	}
	if svc.calls.Load() != 0 || svc.value != "" {
		t.Fatalf("bad input reached the handler %d times", svc.calls.Load())
	}
	for _, lock := range []string{"a", "", long} {
		if _, ok := store.Mark("", lock, ""); ok {
			t.Fatalf("mark set for %.10q", lock)
		}
	}
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// TestMiddlewareFailedWrite: the handler's 4xx is passed on and the mark
// stays where it was.
func TestMiddlewareFailedWrite(t *testing.T) {
	store := fence.NewMemoryStore()
	svc := &valueService{}
	h := httpfence.Handler(store, svc)
	put(t, h, hdr("l", 2), "two")
	a := put(t, h, hdr("l", 7), "fail")
	if a.status != http.StatusUnprocessableEntity || !strings.Contains(a.text, "cannot store that") {
		t.Fatalf("failing handler: %+v", a)
	}
	if m, _ := store.Mark("", "l", ""); m != 2 {
		t.Fatalf("mark %d after a failed write, want 2", m)
	}
	if a := put(t, h, hdr("l", 3), "three"); a.status != 200 {
		t.Fatalf("token 3 after the failed 7: %+v", a)
	}
}

type failingStore struct{}

func (failingStore) Fence(context.Context, string, fence.Token, func(context.Context) error) error {
	return errors.New("database down")
}

func TestMiddlewareStoreError(t *testing.T) {
	var logged error
	h := httpfence.Handler(failingStore{}, &valueService{}, httpfence.WithErrorLog(func(_ *http.Request, err error) { logged = err }))
	a := put(t, h, hdr("l", 1), "x")
	if a.status != 500 || a.body["error"] != "fence store failed" || strings.Contains(a.text, "database down") || logged == nil {
		t.Fatalf("%+v, logged %v", a, logged)
	}
}

func TestMiddlewareResource(t *testing.T) {
	store := fence.NewMemoryStore()
	h := httpfence.Handler(store, &valueService{}, httpfence.WithResource(func(r *http.Request) string { return r.URL.Path }))
	put(t, h, hdr("l", 5), "x")
	if m, ok := store.Mark("/value", "l", ""); !ok || m != 5 {
		t.Fatalf("mark of /value: %d %v", m, ok)
	}
}

// openSQLite opens a SQLite database for the SQL store.
func openSQLite(t *testing.T) *sql.DB {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "f.db")+"?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(32)
	return db
}

// TestConcurrentClients: 16 clients with interleaved tokens PUT their
// token to one value through the middleware, over HTTP; the value keeps the
// history of the writes that landed, in the order they landed.
func TestConcurrentClients(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		var history []uint64 // appended by the handler, under the store's key lock
		concurrentClients(t, fence.NewMemoryStore(), func(r *http.Request, tok uint64) error {
			history = append(history, tok)
			return nil
		}, func() []uint64 { return history })
	})
	t.Run("SQLite", func(t *testing.T) {
		db := openSQLite(t)
		store, err := sqlfence.New(context.Background(), db, sqlfence.SQLite, "marks")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec("CREATE TABLE value (id INTEGER PRIMARY KEY, history TEXT NOT NULL); INSERT INTO value VALUES (1, '')"); err != nil {
			t.Fatal(err)
		}
		concurrentClients(t, store, func(r *http.Request, tok uint64) error {
			tx, ok := sqlfence.TxFrom(r.Context())
			if !ok {
				return errors.New("no fenced transaction")
			}
			_, err := tx.ExecContext(r.Context(), "UPDATE value SET history = history || ? WHERE id = 1", fmt.Sprintf(",%d", tok))
			return err
		}, func() []uint64 {
			var h string
			if err := db.QueryRow("SELECT history FROM value WHERE id = 1").Scan(&h); err != nil {
				t.Fatal(err)
			}
			var out []uint64
			for f := range strings.SplitSeq(strings.TrimPrefix(h, ","), ",") {
				var v uint64
				fmt.Sscan(f, &v)
				out = append(out, v)
			}
			return out
		})
	})
}

func concurrentClients(t *testing.T, store fence.Store, write func(r *http.Request, tok uint64) error, history func() []uint64) {
	srv := httptest.NewServer(httpfence.Handler(store, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var tok uint64
		fmt.Sscan(r.URL.Query().Get("tok"), &tok)
		if err := write(r, tok); err != nil {
			http.Error(w, err.Error(), 500)
		}
	})))
	defer srv.Close()
	client := &http.Client{Transport: httpfence.NewTransport(nil)}
	out := fencetest.Hammer(context.Background(), 16, 40, 3, func(ctx context.Context, v uint64) error {
		tok := fence.Token{Lock: "value", Value: v}
		req, err := http.NewRequestWithContext(httpfence.ContextWithToken(ctx, tok), http.MethodPut, fmt.Sprintf("%s/value?tok=%d", srv.URL, v), nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		if stale := httpfence.Stale(resp, "", tok); stale != nil {
			return stale
		}
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	})
	fencetest.Check(t, history(), out)
}

// TestMiddlewareCheckedStore: behind a fence.Checked store, a token whose
// lease ended is refused with 409 before anyone newer wrote, and a live
// one writes.
func TestMiddlewareCheckedStore(t *testing.T) {
	live := int64(5)
	check := func(_ context.Context, tok fence.Token) (bool, int64, error) {
		return live >= 0 && uint64(live) == tok.Value, live, nil
	}
	svc := &valueService{}
	h := httpfence.Handler(fence.Checked(fence.NewMemoryStore(), check), svc)
	if a := put(t, h, hdr("orders/42", 5), "five"); a.status != 200 || svc.value != "five" {
		t.Fatalf("live token 5: %+v", a)
	}
	live = -1 // token 5's lease ended; no one holds the lock
	a := put(t, h, hdr("orders/42", 5), "late")
	if a.status != http.StatusConflict || a.body["error"] != "fencing token's lease ended" || a.body["token"] != 5.0 ||
		a.header.Get(httpfence.CurrentHeader) != "" || a.header.Get(httpfence.LapsedHeader) != "true" {
		t.Fatalf("lapsed token 5: %+v", a)
	}
	live = 6 // a later holder, which has not written yet
	a = put(t, h, hdr("orders/42", 5), "late")
	if a.status != http.StatusConflict || a.header.Get(httpfence.CurrentHeader) != "6" || a.body["error"] != "stale fencing token" {
		t.Fatalf("superseded token 5: %+v", a)
	}
	if svc.value != "five" || svc.calls.Load() != 1 {
		t.Fatalf("a refused write reached the handler: value %q, %d calls", svc.value, svc.calls.Load())
	}
	// The client side reads both refusals back.
	tok := fence.Token{Lock: "orders/42", Value: 5}
	for _, tc := range []struct {
		live    int64
		lapsed  bool
		current uint64
	}{{-1, true, 0}, {6, false, 6}} {
		live = tc.live
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPut, "/value", strings.NewReader("late"))
		req.Header.Set(httpfence.Header, httpfence.FormatHeader(tok))
		h.ServeHTTP(rec, req)
		stale := httpfence.Stale(rec.Result(), "", tok)
		if stale == nil || stale.Lapsed != tc.lapsed || stale.Current != tc.current {
			t.Fatalf("live %d: Stale read %+v, want lapsed %v current %d", tc.live, stale, tc.lapsed, tc.current)
		}
	}
}
