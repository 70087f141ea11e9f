package kahuna

import (
	crand "crypto/rand"
	"encoding/hex"
	"time"
)

// unsafeNoDeadline switches every Lock's deadline off (unsafe_knobs.go,
// in a build with the kahuna_unsafe tag only).
var unsafeNoDeadline bool

type acquireOptions struct {
	ttl        time.Duration
	wait       time.Duration
	durability Durability
	owner      []byte
	ownOwner   bool // owner was minted by Acquire, not given by WithOwner
	margin     time.Duration
	marginSet  bool
	clock      handleClock
	// noExtendCap: an Extend of unknown outcome does not cap the deadline
	// (a negative control of the fault tests, testhooks.go).
	noExtendCap bool
	// noDeadline: the Lock ignores its deadline (a negative control,
	// testhooks.go).
	noDeadline bool
	notice     func(error) // WithRetryNotice
	session    *Session    // WithSession
	// suffix follows the session's ID in the owner of a lock held in a
	// session (an election candidate's value).
	suffix []byte
	// whole: the request goes whole to a Locker that takes it so (doerOf):
	// a semaphore's permits (how many, the limit stated) or a read lock
	// (shared).
	whole          bool
	permits, limit int
	shared         bool
	// also, with whole: more names the same request locks with the
	// resource, all or none, in one replicated step (AcquireAll).
	also []string
}

// acquireOptionsOf is the defaults with opts applied.
func acquireOptionsOf(opts []AcquireOption) acquireOptions {
	o := acquireOptions{ttl: defaultTTL, durability: Persistent, clock: systemClock{}, noDeadline: unsafeNoDeadline}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// AcquireOption tunes Acquire.
type AcquireOption func(*acquireOptions)

// WithTTL sets the lease length (default 30 s). The wire carries whole
// milliseconds, so the handle counts a TTL truncated to the millisecond.
func WithTTL(ttl time.Duration) AcquireOption { return func(o *acquireOptions) { o.ttl = ttl } }

// WithWait lets Acquire wait up to wait for a busy lock (default 0: one
// attempt). With a Locker that is a WaitLocker (the embedded *Node),
// Acquire waits on the server, in the resource's first-in first-out queue
// of waiters: the lock goes to the longest waiter the moment it is
// released or its lease ends, with no polling. With any other Locker (a
// plain Kahuna server) Acquire polls TryLock with jittered exponential
// backoff (1 to 50 ms), which is neither fair nor prompt under contention.
//
// wait may be WaitForever (see WithWaitForever). A negative wait other
// than that, or one over MaxWait, makes Acquire return a *StatusError with
// InvalidInput without a request.
func WithWait(wait time.Duration) AcquireOption { return func(o *acquireOptions) { o.wait = wait } }

// WithWaitForever lets Acquire wait for a busy lock until ctx ends (like
// etcd's Mutex.Lock): WithWait(WaitForever). Retries of MustRetry and of
// unknown outcomes are then bounded by ctx alone too.
func WithWaitForever() AcquireOption { return WithWait(WaitForever) }

// WithDurability chooses Ephemeral or Persistent (default Persistent).
func WithDurability(d Durability) AcquireOption {
	return func(o *acquireOptions) { o.durability = d }
}

// WithRetryNotice has Acquire tell f when it retries because no answer
// came: f(err) before each retry after a call that failed (the nodes
// could not be reached, or answered MustRetry or an outcome it cannot
// know), and f(nil) once, at the first answer after such retries. A busy
// lock is an answer: waiting for it is not a retry. f runs on Acquire's
// goroutine and must not block. A CLI uses it to say that a node is
// unreachable, and when it answers again, instead of waiting in silence.
func WithRetryNotice(f func(err error)) AcquireOption {
	return func(o *acquireOptions) { o.notice = f }
}

// WithOwner sets the owner (default: a fresh random 32-character owner).
//
// If owner already holds the lock (an earlier Acquire, another process),
// Acquire returns that grant (Locked, same token) without refreshing its
// lease, which may have started before this Acquire: the new Lock's
// deadline would then be too late. Call Extend on it before relying on
// its deadline. And since such an owner may be held elsewhere, Acquire
// does not make its clean-up Unlock (see Acquire) for a given owner.
func WithOwner(owner []byte) AcquireOption {
	return func(o *acquireOptions) { o.owner = append([]byte(nil), owner...) }
}

// WithSafetyMargin sets how much earlier than the server the holder
// considers its lease over: the Lock's deadline (Expires, Context, Lost)
// is the send time of the request that granted or last extended the lease,
// plus that request's TTL, minus d. A negative d counts as 0.
//
// The default is 1 % of the TTL plus 2 ms, for every grant and extend
// (302 ms of a 30 s lease; the same rule as Redlock's clock drift
// factor). The holder measures from the moment it sent the request, which
// is no later than the moment the server started the lease, so network
// delay is already on the safe side; what the margin must cover is the
// server's clock running faster than the holder's over one TTL (crystal
// and NTP slew rates are at most a few hundred ppm, so 1 % leaves an order
// of magnitude to spare), the wire's millisecond rounding of TTLs and
// recorded expiries, and timer slack. It does not cover a wall-clock skew
// between the nodes of a cluster: a persistent lock's expiry is recorded
// in wall-clock milliseconds and a new leader enforces it after failover
// with its own wall clock, so where nodes' clocks may differ by more than
// the default margin, pass at least that skew plus the 1 %. No margin
// covers a holder paused past its deadline (GC, SIGSTOP, a VM freeze):
// pass FencingToken to what the lock protects.
func WithSafetyMargin(d time.Duration) AcquireOption {
	return func(o *acquireOptions) { o.margin, o.marginSet = max(d, 0), true }
}

// withClock makes the Lock measure time with c (tests).
func withClock(c handleClock) AcquireOption { return func(o *acquireOptions) { o.clock = c } }

// NewOwner returns a fresh random owner: 32 lowercase hex characters, like
// Kahuna's clients mint.
func NewOwner() []byte {
	var b [16]byte
	_, _ = crand.Read(b[:])
	return []byte(hex.EncodeToString(b[:]))
}
