package peers

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kahunago/kahuna/bench"
	"github.com/kahunago/kahuna/lease"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	recipe "go.etcd.io/etcd/client/v3/experimental/recipes"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// etcdPrefix keeps the benchmark's locks apart from anything else in etcd.
const etcdPrefix = "/kahuna-bench/"

// EtcdTarget is etcd used as its own client library intends: a
// concurrency.Mutex per lock, TryLock to lock, Unlock to release, one
// session (one lease, kept alive) per worker. Every write is a Raft commit
// fsynced by etcd: compare it with kahuna's persistent locks. The fencing
// token is the revision of the grant.
//
// Its lockers are lease.WaitLockers: a Lock with a wait is Mutex.Lock,
// which queues the caller behind the keys created before its own and
// watches for their deletion (hot-wait measures that). The system counts
// the requests etcd receives at the client's gRPC layer: every unary call
// and every message sent on a stream (watch creations and the sessions'
// lease keep-alives included).
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
	rpcs   atomic.Int64
	ttl    int // session lease, seconds
	srv    *server
	mu     sync.Mutex
	closed []*concurrency.Session
}

func openEtcd(ctx context.Context, o *Options, s bench.Settings) (bench.System, error) {
	endpoints := strings.Split(o.EtcdEndpoints, ",")
	var srv *server
	if o.StartServer {
		var clientURL string
		var err error
		srv, clientURL, err = startEtcd(ctx, o.EtcdServer)
		if err != nil {
			return nil, err
		}
		endpoints = []string{clientURL}
		s.Logger.Info("etcd started", "endpoint", clientURL, "dir", srv.dir)
	}
	e := &etcdSystem{ttl: int(max(math.Ceil(s.TTL.Seconds()), 1)), srv: srv}
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{
			grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				e.rpcs.Add(1)
				return invoker(ctx, method, req, reply, cc, opts...)
			}),
			grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
				cs, err := streamer(ctx, desc, cc, method, opts...)
				if err != nil {
					return nil, err
				}
				return countedStream{cs, &e.rpcs}, nil
			}),
		}})
	if err != nil {
		if srv != nil {
			err = errors.Join(err, srv.stop())
		}
		return nil, fmt.Errorf("etcd client %v: %w", endpoints, err)
	}
	e.cli = cli
	// Fail here, not in every worker, if nobody answers.
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := cli.Get(rctx, "ready"); err != nil {
		return nil, errors.Join(fmt.Errorf("etcd %v: %w", endpoints, err), e.Close())
	}
	return e, nil
}

// startEtcd runs a single-member etcd (the binary bin) on free loopback
// ports with a temp data dir, and waits until it answers.
func startEtcd(ctx context.Context, bin string) (srv *server, clientURL string, err error) {
	err = withFreePorts(2, func(ports []int) error { // client, peer
		var peerURL string
		clientURL, peerURL = "http://"+loopback(ports[0]), "http://"+loopback(ports[1])
		srv, err = startServer(ctx, "etcd", bin, func(dir string) []string {
			return []string{
				"--name", "bench", "--data-dir", dir + "/data",
				"--listen-client-urls", clientURL, "--advertise-client-urls", clientURL,
				"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
				"--initial-cluster", "bench=" + peerURL, "--logger", "zap", "--log-outputs", "stderr",
			}
		}, func(ctx context.Context) error { return etcdReady(ctx, clientURL) })
		return err
	})
	return srv, clientURL, err
}

// startEtcdClient starts a single-member etcd (startEtcd) and opens a
// client to it.
func startEtcdClient(ctx context.Context, bin string) (*server, *clientv3.Client, string, error) {
	srv, endpoint, err := startEtcd(ctx, bin)
	if err != nil {
		return nil, nil, "", err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, nil, "", errors.Join(err, srv.stop())
	}
	return srv, cli, endpoint, nil
}

// countedStream counts the messages sent on an etcd stream.
type countedStream struct {
	grpc.ClientStream
	n *atomic.Int64
}

func (c countedStream) SendMsg(m any) error {
	c.n.Add(1)
	return c.ClientStream.SendMsg(m)
}

// Requests implements bench.RequestCounter.
func (e *etcdSystem) Requests() (int64, string) {
	return e.rpcs.Load(), "etcd gRPC requests (unary calls and stream messages, counted by the client)"
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
	return &EtcdLocker{sess: sess, held: map[string]*concurrency.Mutex{}, rw: map[string]rwHold{}}, nil
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
	rw   map[string]rwHold
}

// rwHold is a read/write lock held through etcd's recipe.RWMutex.
type rwHold struct {
	m    *recipe.RWMutex
	read bool
}

var (
	_ lease.WaitLocker = (*EtcdLocker)(nil)
	_ lease.Doer       = (*EtcdLocker)(nil)
)

// errEtcdNoSemaphore: etcd's client has no semaphore recipe.
var errEtcdNoSemaphore = errors.New("etcd has no semaphore recipe (read/write locks: recipe.RWMutex)")

// Do implements lease.Doer, for the hot-wait workload's read/write lock
// (a name starting with rwlock:): etcd's recipe.RWMutex, RLock for a read
// lock and Lock for the write lock. The recipe takes no context and no
// wait: it returns once granted, so a request's wait is taken as "until
// granted". Its holders are ordered by their keys' revisions, as the
// Mutex's are. There is no fencing token (0). A semaphore's request is
// refused. Everything else goes to the Locker's methods.
func (l *EtcdLocker) Do(ctx context.Context, req lease.Checked) (lease.LockInfo, lease.Result, error) {
	r := req.Request()
	switch {
	case r.Permits != 0 || r.Limit != 0:
		return lease.LockInfo{}, lease.Result{}, errEtcdNoSemaphore
	case lease.IsRWLock(r.Resource) && r.Op == lease.TryLock:
		m := recipe.NewRWMutex(l.sess, etcdPrefix+r.Resource)
		lock := m.Lock
		if r.Shared {
			lock = m.RLock
		}
		if err := lock(); err != nil {
			return lease.LockInfo{}, lease.Result{}, fmt.Errorf("etcd recipe.RWMutex: %w", err)
		}
		l.mu.Lock()
		l.rw[r.Resource] = rwHold{m: m, read: r.Shared}
		l.mu.Unlock()
		return lease.LockInfo{}, lease.Result{Status: lease.Locked}, nil
	}
	var (
		res lease.Result
		err error
	)
	switch r.Op {
	case lease.TryLock:
		res, err = l.Lock(ctx, r.Resource, r.Owner, r.TTL, r.Wait, r.Durability)
	case lease.Extend:
		res, err = l.Extend(ctx, r.Resource, r.Owner, r.TTL, r.Durability)
	case lease.Unlock:
		res, err = l.Unlock(ctx, r.Resource, r.Owner, r.Durability)
	case lease.Get:
		return l.Get(ctx, r.Resource, r.Durability)
	}
	return lease.LockInfo{}, res, err
}

// Lock implements lease.WaitLocker with Mutex.Lock, bounded by wait
// (lease.WaitForever: by ctx alone): Busy if the wait ends first. A wait of
// 0 is TryLock. The ttl is the session's.
func (l *EtcdLocker) Lock(ctx context.Context, resource string, owner []byte, ttl, wait time.Duration, d lease.Durability) (lease.Result, error) {
	if wait == 0 {
		return l.TryLock(ctx, resource, owner, ttl, d)
	}
	if !lease.ValidWait(wait) {
		return lease.Result{Status: lease.InvalidInput}, nil
	}
	wctx, cancel := ctx, context.CancelFunc(func() {})
	if wait != lease.WaitForever {
		wctx, cancel = context.WithTimeout(ctx, wait)
	}
	defer cancel()
	m := concurrency.NewMutex(l.sess, etcdPrefix+resource)
	err := m.Lock(wctx)
	switch {
	case err != nil && ctx.Err() == nil && wctx.Err() != nil:
		return lease.Result{Status: lease.Busy}, nil // the wait ended (Lock removed its key)
	case err != nil:
		return lease.Result{}, fmt.Errorf("etcd Lock: %w", err)
	}
	l.mu.Lock()
	l.held[resource] = m
	l.mu.Unlock()
	return lease.Result{Status: lease.Locked, FencingToken: m.Header().Revision}, nil
}

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

// Unlock implements lease.Locker (a read/write lock's too: RUnlock or
// Unlock, as it was taken).
func (l *EtcdLocker) Unlock(ctx context.Context, resource string, _ []byte, _ lease.Durability) (lease.Result, error) {
	l.mu.Lock()
	h, isRW := l.rw[resource]
	delete(l.rw, resource)
	l.mu.Unlock()
	if isRW {
		unlock := h.m.Unlock
		if h.read {
			unlock = h.m.RUnlock
		}
		if err := unlock(); err != nil {
			return lease.Result{}, fmt.Errorf("etcd recipe.RWMutex unlock: %w", err)
		}
		return lease.Result{Status: lease.Unlocked}, nil
	}
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
