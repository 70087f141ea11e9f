package transport

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kahunago/kahuna/lease"
)

// fakeLocker is an in-memory lease.Locker with the semantics table's behaviour (docs/semantics.md)
// (lease.Decide over a mutex-guarded map) and a settable clock. The real
// engine is tested elsewhere; this one exists to exercise the wire.
type fakeLocker struct {
	mu      sync.Mutex
	now     time.Time
	entries map[fakeKey]lease.Entry

	// served counts requests that reached the Locker: a bad request that
	// the transport refuses must not change it.
	served atomic.Int64
	// hook, when set, runs first on every request; handled=true answers
	// st and err instead of deciding. It may block or panic.
	hook func(ctx context.Context, op lease.Op, resource string) (st lease.Status, err error, handled bool)
}

type fakeKey struct {
	d        lease.Durability
	resource string
}

// fakeEpoch is the fake's initial clock, whole milliseconds so expiries
// survive the wire's unix-ms round trip exactly.
var fakeEpoch = time.UnixMilli(1_750_000_000_000)

func newFake() *fakeLocker {
	return &fakeLocker{now: fakeEpoch, entries: make(map[fakeKey]lease.Entry)}
}

func (f *fakeLocker) advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.mu.Unlock()
}

func (f *fakeLocker) clock() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeLocker) decide(ctx context.Context, op lease.Op, resource string, owner []byte, ttl time.Duration, d lease.Durability) (lease.LockInfo, lease.Result, error) {
	f.served.Add(1)
	if f.hook != nil {
		if st, err, handled := f.hook(ctx, op, resource); handled {
			return lease.LockInfo{}, lease.Result{Status: st}, err
		}
	}
	if err := ctx.Err(); err != nil {
		return lease.LockInfo{}, lease.Result{}, err
	}
	if !lease.Valid(op, resource, owner, ttl, d) {
		return lease.LockInfo{}, lease.Result{Status: lease.InvalidInput}, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	k := fakeKey{d, resource}
	e := f.entries[k]
	dec := lease.Decide(e, op, owner, ttl, f.now)
	if dec.Write {
		// Decide may alias the caller's owner buffer; keep a copy.
		dec.Next.Owner = bytes.Clone(dec.Next.Owner)
		f.entries[k] = dec.Next
	}
	var info lease.LockInfo
	if dec.Status == lease.Got {
		info = lease.LockInfo{Owner: bytes.Clone(e.Owner), Expires: e.Expires, FencingToken: e.Token}
	}
	return info, lease.Result{Status: dec.Status, FencingToken: dec.Token}, nil
}

func (f *fakeLocker) TryLock(ctx context.Context, resource string, owner []byte, ttl time.Duration, d lease.Durability) (lease.Result, error) {
	_, r, err := f.decide(ctx, lease.TryLock, resource, owner, ttl, d)
	return r, err
}

func (f *fakeLocker) Extend(ctx context.Context, resource string, owner []byte, ttl time.Duration, d lease.Durability) (lease.Result, error) {
	_, r, err := f.decide(ctx, lease.Extend, resource, owner, ttl, d)
	return r, err
}

func (f *fakeLocker) Unlock(ctx context.Context, resource string, owner []byte, d lease.Durability) (lease.Result, error) {
	_, r, err := f.decide(ctx, lease.Unlock, resource, owner, 0, d)
	return r, err
}

func (f *fakeLocker) Get(ctx context.Context, resource string, d lease.Durability) (lease.LockInfo, lease.Result, error) {
	return f.decide(ctx, lease.Get, resource, nil, 0, d)
}

// gate makes a hook that parks requests for one resource until released,
// announcing each arrival.
type gate struct {
	resource string
	arrived  chan struct{}
	release  chan struct{}
}

func newGate(resource string) *gate {
	return &gate{resource: resource, arrived: make(chan struct{}, 1024), release: make(chan struct{})}
}

func (g *gate) hook(ctx context.Context, _ lease.Op, resource string) (lease.Status, error, bool) {
	if resource != g.resource {
		return 0, nil, false
	}
	g.arrived <- struct{}{}
	select {
	case <-g.release:
	case <-ctx.Done():
	}
	return 0, nil, false
}

// testServer is a Server with its listeners on loopback.
type testServer struct {
	*Server
	mixed  string // REST + h2c gRPC, host:port
	native string // native gRPC, host:port
}

func startServer(t testing.TB, l lease.Locker, opts ServerOptions) *testServer {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := NewServer(l, opts)
	ts := &testServer{Server: s}
	mixed, native := listen(t), listen(t)
	ts.mixed, ts.native = mixed.Addr().String(), native.Addr().String()
	served := make(chan error, 2)
	go func() { served <- s.ServeHTTP(mixed) }()
	go func() { served <- s.ServeGRPC(native) }()
	t.Cleanup(func() {
		s.Close()
		for range 2 {
			// ErrServerClosed: the serve goroutine began after a test's
			// own Shutdown (TestServeAfterClose covers that answer).
			if err := <-served; err != nil && !errors.Is(err, ErrServerClosed) {
				t.Errorf("serve returned %v after Close", err)
			}
		}
	})
	return ts
}

func listen(t testing.TB) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return lis
}

func dial(t testing.TB, endpoints []string, opts ...ClientOption) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, endpoints, opts...)
	if err != nil {
		t.Fatalf("Dial(%v): %v", endpoints, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// testCtx bounds a test's calls, so a hang fails the test instead of
// stalling the run.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// forwardedTo answers every call of l as the node does a forwarded one:
// with ServedFrom the leader's client URL.
type forwardedTo struct {
	lease.Locker
	url string
}

func (f forwardedTo) TryLock(ctx context.Context, resource string, owner []byte, ttl time.Duration, d lease.Durability) (lease.Result, error) {
	r, err := f.Locker.TryLock(ctx, resource, owner, ttl, d)
	r.ServedFrom = f.url
	return r, err
}

func (f forwardedTo) Extend(ctx context.Context, resource string, owner []byte, ttl time.Duration, d lease.Durability) (lease.Result, error) {
	r, err := f.Locker.Extend(ctx, resource, owner, ttl, d)
	r.ServedFrom = f.url
	return r, err
}

func (f forwardedTo) Unlock(ctx context.Context, resource string, owner []byte, d lease.Durability) (lease.Result, error) {
	r, err := f.Locker.Unlock(ctx, resource, owner, d)
	r.ServedFrom = f.url
	return r, err
}

func (f forwardedTo) Get(ctx context.Context, resource string, d lease.Durability) (lease.LockInfo, lease.Result, error) {
	info, r, err := f.Locker.Get(ctx, resource, d)
	r.ServedFrom = f.url
	return info, r, err
}
