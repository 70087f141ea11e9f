package peers

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/kahunago/kahuna/bench"
	"github.com/kahunago/kahuna/lease"
	"github.com/redis/go-redis/v9"
)

// RedisTarget is a single Redis instance used as the Redis docs' lock
// recipe: SET key owner NX PX ttl to lock, a Lua compare-and-delete to
// unlock, a Lua compare-and-pexpire to extend. Redis has no durability per
// lock: it is the server's (none, or with --redis-appendfsync-always an
// append-only file fsynced on every write). Redis has no fencing tokens.
func RedisTarget(o *Options) bench.Target {
	return bench.Target{
		Name:  "redis",
		About: "a Redis server at --redis-addr, or its own with --start-server (SET NX PX + Lua unlock)",
		Open: func(ctx context.Context, s bench.Settings) (bench.System, error) {
			return openRedis(ctx, o, s)
		},
	}
}

func openRedis(ctx context.Context, o *Options, s bench.Settings) (bench.System, error) {
	addr := o.RedisAddr
	var srv *server
	if o.StartServer {
		var err error
		if srv, addr, err = startRedis(ctx, o.RedisServer, o.RedisAppendfsyncAlways); err != nil {
			return nil, err
		}
		s.Logger.Info("redis-server started", "addr", addr, "appendfsync_always", o.RedisAppendfsyncAlways, "dir", srv.dir)
	}
	c := redis.NewClient(&redis.Options{
		Addr:            addr,
		PoolSize:        s.Concurrency, // a connection per worker, as redis-benchmark's -c
		MinIdleConns:    s.Concurrency,
		DisableIdentity: true, // CLIENT SETINFO is Redis ≥ 7.2
	})
	closeAll := func() error {
		err := c.Close()
		if srv != nil {
			err = errors.Join(err, srv.stop())
		}
		return err
	}
	if err := c.Ping(ctx).Err(); err != nil {
		return nil, errors.Join(fmt.Errorf("ping %s: %w", addr, err), closeAll())
	}
	return bench.Shared{L: &RedisLocker{c: c}, CloseFn: closeAll}, nil
}

// startRedis runs redis-server (the binary bin) on a free loopback port
// with a temp dir, and waits until it answers. fsyncAlways turns on its
// append-only file, fsynced on every write; otherwise it keeps nothing.
func startRedis(ctx context.Context, bin string, fsyncAlways bool) (srv *server, addr string, err error) {
	persistence := []string{"--save", "", "--appendonly", "no"}
	if fsyncAlways {
		persistence = []string{"--save", "", "--appendonly", "yes", "--appendfsync", "always"}
	}
	err = withFreePorts(1, func(ports []int) error {
		addr = loopback(ports[0])
		srv, err = startServer(ctx, "redis", bin, func(dir string) []string {
			return append([]string{"--port", strconv.Itoa(ports[0]), "--bind", "127.0.0.1", "--dir", dir, "--daemonize", "no", "--protected-mode", "no"}, persistence...)
		}, func(ctx context.Context) error { return ping(ctx, addr) })
		return err
	})
	return srv, addr, err
}

// ping checks that a Redis server answers at addr. Each try is short (the
// caller tries again): go-redis bounds a read by its timeout, not by the
// context's end, and what answers the connection might not be Redis.
func ping(ctx context.Context, addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
	defer c.Close()
	return c.Ping(ctx).Err()
}

// The scripts answer 1 done, 0 no such key, -1 someone else's key: the
// compare and the write are one atomic step on the server.
var (
	redisUnlock = redis.NewScript(`
local v = redis.call("GET", KEYS[1])
if v == false then return 0 end
if v ~= ARGV[1] then return -1 end
redis.call("DEL", KEYS[1])
return 1`)
	redisExtend = redis.NewScript(`
local v = redis.call("GET", KEYS[1])
if v == false then return 0 end
if v ~= ARGV[1] then return -1 end
redis.call("PEXPIRE", KEYS[1], ARGV[2])
return 1`)
	redisGet = redis.NewScript(`
local v = redis.call("GET", KEYS[1])
if v == false then return false end
return {v, redis.call("PTTL", KEYS[1])}`)
)

// RedisLocker is a lease.Locker on one Redis instance.
type RedisLocker struct{ c *redis.Client }

var _ lease.Locker = (*RedisLocker)(nil)

// TryLock implements lease.Locker: SET resource owner PX ttl NX.
func (r *RedisLocker) TryLock(ctx context.Context, resource string, owner []byte, ttl time.Duration, _ lease.Durability) (lease.Result, error) {
	err := r.c.Do(ctx, "SET", resource, owner, "PX", ttl.Milliseconds(), "NX").Err()
	switch {
	case errors.Is(err, redis.Nil):
		return lease.Result{Status: lease.Busy}, nil
	case err != nil:
		return lease.Result{}, fmt.Errorf("redis SET NX: %w", err)
	}
	return lease.Result{Status: lease.Locked}, nil
}

// Extend implements lease.Locker.
func (r *RedisLocker) Extend(ctx context.Context, resource string, owner []byte, ttl time.Duration, _ lease.Durability) (lease.Result, error) {
	n, err := redisExtend.Run(ctx, r.c, []string{resource}, owner, ttl.Milliseconds()).Int()
	if err != nil {
		return lease.Result{}, fmt.Errorf("redis extend: %w", err)
	}
	return lease.Result{Status: outcome(n, lease.Extended)}, nil
}

// Unlock implements lease.Locker.
func (r *RedisLocker) Unlock(ctx context.Context, resource string, owner []byte, _ lease.Durability) (lease.Result, error) {
	n, err := redisUnlock.Run(ctx, r.c, []string{resource}, owner).Int()
	if err != nil {
		return lease.Result{}, fmt.Errorf("redis unlock: %w", err)
	}
	return lease.Result{Status: outcome(n, lease.Unlocked)}, nil
}

// Get implements lease.Locker: the owner and the remaining lease.
func (r *RedisLocker) Get(ctx context.Context, resource string, _ lease.Durability) (lease.LockInfo, lease.Result, error) {
	v, err := redisGet.Run(ctx, r.c, []string{resource}).Slice()
	switch {
	case errors.Is(err, redis.Nil):
		return lease.LockInfo{}, lease.Result{Status: lease.LockDoesNotExist}, nil
	case err != nil:
		return lease.LockInfo{}, lease.Result{}, fmt.Errorf("redis get: %w", err)
	case len(v) != 2:
		return lease.LockInfo{}, lease.Result{}, fmt.Errorf("redis get: %d values, want 2", len(v))
	}
	owner, _ := v[0].(string)
	pttl, _ := v[1].(int64)
	info := lease.LockInfo{Owner: []byte(owner), Expires: time.Now().Add(time.Duration(pttl) * time.Millisecond).Truncate(time.Millisecond)}
	return info, lease.Result{Status: lease.Got}, nil
}

func outcome(n int, ok lease.Status) lease.Status {
	switch n {
	case 1:
		return ok
	case 0:
		return lease.LockDoesNotExist
	}
	return lease.InvalidOwner
}
