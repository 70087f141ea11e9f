package bench

import (
	"context"
	"sync"
	"time"

	"github.com/kahunago/kahuna/lease"
)

// fakeLocker answers every call the same way, after an optional delay
// during which it holds a mutex: a single-threaded server that takes delay
// per call.
type fakeLocker struct {
	mu     sync.Mutex
	delay  time.Duration
	status lease.Status // TryLock's answer; Extend, Unlock and Get succeed
	err    error        // returned by every call when set
}

func (f *fakeLocker) call(ctx context.Context) error {
	if f.delay > 0 {
		f.mu.Lock()
		time.Sleep(f.delay)
		f.mu.Unlock()
	}
	if f.err != nil {
		return f.err
	}
	return ctx.Err()
}

func (f *fakeLocker) TryLock(ctx context.Context, _ string, _ []byte, _ time.Duration, _ lease.Durability) (lease.Result, error) {
	if err := f.call(ctx); err != nil {
		return lease.Result{}, err
	}
	return lease.Result{Status: f.status}, nil
}

func (f *fakeLocker) Extend(ctx context.Context, _ string, _ []byte, _ time.Duration, _ lease.Durability) (lease.Result, error) {
	return lease.Result{Status: lease.Extended}, f.call(ctx)
}

func (f *fakeLocker) Unlock(ctx context.Context, _ string, _ []byte, _ lease.Durability) (lease.Result, error) {
	return lease.Result{Status: lease.Unlocked}, f.call(ctx)
}

func (f *fakeLocker) Get(ctx context.Context, _ string, _ lease.Durability) (lease.LockInfo, lease.Result, error) {
	return lease.LockInfo{}, lease.Result{Status: lease.Got}, f.call(ctx)
}

// fakeTarget serves l to every worker.
func fakeTarget(name string, l lease.Locker) Target {
	return Target{Name: name, Open: func(context.Context, Settings) (System, error) { return Shared{L: l}, nil }}
}

// testConfig is a short closed-loop run of workload against the default
// key space; tests adjust what they pin.
func testConfig(workload string) *Config {
	return &Config{
		Workload:    workload,
		Mix:         []MixPart{{rowLock, 1}, {rowGet, 1}},
		Extends:     DefaultExtends,
		KeyPrefix:   DefaultKeyPrefix,
		TTL:         DefaultTTL,
		Concurrency: 4,
		Duration:    200 * time.Millisecond,
		Warmup:      0,
		Timeout:     time.Second,
		Format:      "console",
	}
}
