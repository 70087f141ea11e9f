package peers

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/kahunago/kahuna/bench"
	"github.com/kahunago/kahuna/lease"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

// etcdPrefix keeps the benchmark's locks apart from anything else in etcd.
const etcdPrefix = "/kahuna-bench/"

// EtcdTarget is etcd used as its own client library intends: a
// concurrency.Mutex per lock, TryLock to lock, Unlock to release, one
// session (one lease, kept alive) per worker. Every write is a Raft commit
// fsynced by etcd: compare it with kahuna's persistent locks. The fencing
// token is the revision of the grant.
func EtcdTarget(o *Options) bench.Target {
	return bench.Target{
		Name:  "etcd",
		About: "an etcd server at --etcd-endpoints, or its own with --start-server (concurrency.Mutex, a session per worker)",
		Open: func(ctx context.Context, s bench.Settings) (bench.System, error) {
			return openEtcd(ctx, o, s)
		},
	}
}

// etcdSystem is one client shared by every worker, and a session each.
type etcdSystem struct {
	cli    *clientv3.Client
	ttl    int // session lease, seconds
	srv    *server
	mu     sync.Mutex
	closed []*concurrency.Session
}

func openEtcd(ctx context.Context, o *Options, s bench.Settings) (bench.System, error) {
	endpoints := strings.Split(o.EtcdEndpoints, ",")
	var srv *server
	if o.StartServer {
		client, err := freePort()
		if err != nil {
			return nil, err
		}
		peer, err := freePort()
		if err != nil {
			return nil, err
		}
		clientURL, peerURL := "http://"+loopback(client), "http://"+loopback(peer)
		endpoints = []string{clientURL}
		srv, err = startServer(ctx, "etcd", o.EtcdServer, func(dir string) []string {
			return []string{
				"--name", "bench", "--data-dir", dir + "/data",
				"--listen-client-urls", clientURL, "--advertise-client-urls", clientURL,
				"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
				"--initial-cluster", "bench=" + peerURL, "--logger", "zap", "--log-outputs", "stderr",
			}
		}, func(ctx context.Context) error { return etcdReady(ctx, clientURL) })
		if err != nil {
			return nil, err
		}
		s.Logger.Info("etcd started", "endpoint", clientURL, "dir", srv.dir)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		if srv != nil {
			err = errors.Join(err, srv.stop())
		}
		return nil, fmt.Errorf("etcd client %v: %w", endpoints, err)
	}
	return &etcdSystem{cli: cli, ttl: int(max(math.Ceil(s.TTL.Seconds()), 1)), srv: srv}, nil
}

func etcdReady(ctx context.Context, endpoint string) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	_, err = cli.Get(ctx, "ready")
	return err
}

// Locker implements bench.System: a new session (lease) for each worker.
func (e *etcdSystem) Locker(ctx context.Context, _ int) (lease.Locker, error) {
	sess, err := concurrency.NewSession(e.cli, concurrency.WithTTL(e.ttl), concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		return nil, fmt.Errorf("etcd session: %w", err)
	}
	e.mu.Lock()
	e.closed = append(e.closed, sess)
	e.mu.Unlock()
	return &EtcdLocker{sess: sess, held: map[string]*concurrency.Mutex{}}, nil
}

// Close implements bench.System: end the sessions (their locks go with
// them), the client, and the server if it was started here.
func (e *etcdSystem) Close() error {
	var errs []error
	for _, s := range e.closed {
		errs = append(errs, s.Close())
	}
	errs = append(errs, e.cli.Close())
	if e.srv != nil {
		errs = append(errs, e.srv.stop())
	}
	return errors.Join(errs...)
}

// EtcdLocker is one worker's view of etcd locks: the owner is its session,
// whatever owner bytes are passed. It remembers the mutexes it holds,
// since an etcd Mutex is unlocked through the value that locked it.
type EtcdLocker struct {
	sess *concurrency.Session
	mu   sync.Mutex
	held map[string]*concurrency.Mutex
}

var _ lease.Locker = (*EtcdLocker)(nil)

// TryLock implements lease.Locker. The ttl is the session's, set when it
// was created.
func (l *EtcdLocker) TryLock(ctx context.Context, resource string, _ []byte, _ time.Duration, _ lease.Durability) (lease.Result, error) {
	m := concurrency.NewMutex(l.sess, etcdPrefix+resource)
	err := m.TryLock(ctx)
	switch {
	case errors.Is(err, concurrency.ErrLocked):
		return lease.Result{Status: lease.Busy}, nil
	case err != nil:
		return lease.Result{}, fmt.Errorf("etcd TryLock: %w", err)
	}
	l.mu.Lock()
	l.held[resource] = m
	l.mu.Unlock()
	return lease.Result{Status: lease.Locked, FencingToken: m.Header().Revision}, nil
}

// Extend implements lease.Locker: one keep-alive of the session's lease
// (etcd leases belong to sessions, not to locks).
func (l *EtcdLocker) Extend(ctx context.Context, resource string, _ []byte, _ time.Duration, _ lease.Durability) (lease.Result, error) {
	if l.mutex(resource) == nil {
		return lease.Result{Status: lease.LockDoesNotExist}, nil
	}
	if _, err := l.sess.Client().KeepAliveOnce(ctx, l.sess.Lease()); err != nil {
		return lease.Result{}, fmt.Errorf("etcd keep-alive: %w", err)
	}
	return lease.Result{Status: lease.Extended}, nil
}

// Unlock implements lease.Locker.
func (l *EtcdLocker) Unlock(ctx context.Context, resource string, _ []byte, _ lease.Durability) (lease.Result, error) {
	m := l.mutex(resource)
	if m == nil {
		return lease.Result{Status: lease.LockDoesNotExist}, nil
	}
	if err := m.Unlock(ctx); err != nil {
		return lease.Result{}, fmt.Errorf("etcd Unlock: %w", err)
	}
	l.mu.Lock()
	delete(l.held, resource)
	l.mu.Unlock()
	return lease.Result{Status: lease.Unlocked}, nil
}

// Get implements lease.Locker: the holder is the waiter key created first
// under the lock's prefix; its create revision is the fencing token.
func (l *EtcdLocker) Get(ctx context.Context, resource string, _ lease.Durability) (lease.LockInfo, lease.Result, error) {
	resp, err := l.sess.Client().Get(ctx, etcdPrefix+resource+"/", clientv3.WithFirstCreate()...)
	if err != nil {
		return lease.LockInfo{}, lease.Result{}, fmt.Errorf("etcd get: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return lease.LockInfo{}, lease.Result{Status: lease.LockDoesNotExist}, nil
	}
	kv := resp.Kvs[0]
	owner := kv.Key[strings.LastIndexByte(string(kv.Key), '/')+1:]
	return lease.LockInfo{Owner: owner, FencingToken: kv.CreateRevision}, lease.Result{Status: lease.Got, FencingToken: kv.CreateRevision}, nil
}

func (l *EtcdLocker) mutex(resource string) *concurrency.Mutex {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held[resource]
}
