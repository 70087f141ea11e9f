package kahuna_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/lease"
)

// opCounter counts the requests that reach a Locker by kind: "Extend",
// "Extend batch", and so on, whether sent whole (Do) or by method.
type opCounter struct {
	kahuna.WaitLocker
	mu sync.Mutex
	n  map[string]int
}

func (c *opCounter) Do(ctx context.Context, req lease.Checked) (kahuna.LockInfo, kahuna.Result, error) {
	r := req.Request()
	kind := r.Op.String()
	if r.IsBatch() {
		kind += " batch"
	}
	c.count(kind)
	return lease.Do(ctx, c.WaitLocker, req)
}

func (c *opCounter) count(kind string) {
	c.mu.Lock()
	c.n[kind]++
	c.mu.Unlock()
}

func (c *opCounter) Extend(ctx context.Context, res string, owner []byte, ttl time.Duration, d kahuna.Durability) (kahuna.Result, error) {
	c.count("Extend")
	return c.WaitLocker.Extend(ctx, res, owner, ttl, d)
}

func (c *opCounter) Unlock(ctx context.Context, res string, owner []byte, d kahuna.Durability) (kahuna.Result, error) {
	c.count("Unlock")
	return c.WaitLocker.Unlock(ctx, res, owner, d)
}

func (c *opCounter) counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.n {
		out[k] = v
	}
	c.n = map[string]int{}
	return out
}

// A session renews its own lease and all its plain locks in one request
// per renewal, whatever their partitions, and Close releases them in one;
// an election's candidacy in the session is renewed on its own.
func TestSessionRenewsInOneRequest(t *testing.T) {
	ctx := context.Background()
	for _, d := range []kahuna.Durability{kahuna.Persistent, kahuna.Ephemeral} {
		t.Run(d.String(), func(t *testing.T) {
			n := openElectionNode(t, kahuna.Config{Partitions: 8})
			link := &opCounter{WaitLocker: n, n: map[string]int{}}
			s, err := kahuna.NewSession(ctx, link, kahuna.WithTTL(sessionTTL), kahuna.WithDurability(d))
			if err != nil {
				t.Fatal(err)
			}
			names := []string{"a", "b/x", "c", "d/y/z", "e"}
			for _, r := range names {
				if _, err := kahuna.Acquire(ctx, link, r, kahuna.WithSession(s)); err != nil {
					t.Fatal(err)
				}
			}
			ld, err := kahuna.Campaign(ctx, link, "leader", []byte("me"), kahuna.WithSession(s))
			if err != nil {
				t.Fatal(err)
			}
			link.counts()
			deadline := s.Expires()
			candidacy, _ := ld.Context().Deadline()
			for { // one renewal: the session's deadline and the candidacy's move
				d, _ := ld.Context().Deadline()
				if !s.Expires().Equal(deadline) && !d.Equal(candidacy) {
					break
				}
				select {
				case <-s.Context().Done():
					t.Fatalf("session ended: %v", context.Cause(s.Context()))
				case <-time.After(sessionTTL / 50):
				}
			}
			got := link.counts()
			if got["Extend batch"] != 1 || got["Extend"] != 1 || len(got) != 2 {
				t.Fatalf("one renewal sent %v, want one batch and the candidacy's Extend", got)
			}
			if err := ld.Resign(ctx); err != nil {
				t.Fatal(err)
			}
			link.counts()
			if err := s.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if got := link.counts(); got["Unlock batch"] != 1 || len(got) != 1 {
				t.Fatalf("Close sent %v, want one batch", got)
			}
			for _, r := range append(names, kahuna.SessionPrefix+s.ID()) {
				if _, res, err := n.Get(ctx, r, d); err != nil || res.Status != kahuna.LockDoesNotExist {
					t.Fatalf("%s after Close: %v %v", r, res.Status, err)
				}
			}
		})
	}
}

// batchReq is a checked batch of op by owner over names.
func batchReq(t *testing.T, op lease.Op, owner string, d kahuna.Durability, names ...string) lease.Checked {
	t.Helper()
	r := lease.Request{Op: op, Resource: names[0], Owner: []byte(owner), Durability: d}
	if len(names) > 1 {
		r.Also = names[1:]
	}
	if op == lease.Extend {
		r.TTL = time.Hour
	}
	c, why := r.Check()
	if why != "" {
		t.Fatal(why)
	}
	return c
}

// checkBatchAnswers runs a batch of extends, then of unlocks, by "me" over
// names held by me, by another owner and by no one, on l; node reads the
// locks back. Each name is answered on its own and changed only if mine.
func checkBatchAnswers(t *testing.T, l kahuna.Locker, node kahuna.Locker, d kahuna.Durability) {
	t.Helper()
	ctx := context.Background()
	mine := []string{"batch/a", "batch-b", "c/d/e"}
	for _, r := range append(mine, "theirs") {
		owner := "me"
		if r == "theirs" {
			owner = "them"
		}
		if res, err := l.TryLock(ctx, r, []byte(owner), time.Minute, d); err != nil || res.Status != kahuna.Locked {
			t.Fatalf("lock %s: %v %v", r, res.Status, err)
		}
	}
	names := []string{mine[0], "theirs", mine[1], "nobody's", mine[2]}
	each, err := answered(ctx, t, l, lease.Extend, d, names)
	want := []kahuna.Status{kahuna.Extended, kahuna.InvalidOwner, kahuna.Extended, kahuna.LockDoesNotExist, kahuna.Extended}
	if err != nil || !slices.Equal(each, want) {
		t.Fatalf("extend batch: each %v, %v; want each %v", each, err, want)
	}
	for _, r := range append(mine, "theirs") {
		info, got, err := getAnswered(ctx, t, node, r, d)
		if err != nil || got.Status != kahuna.Got {
			t.Fatalf("get %s: %v %v", r, got.Status, err)
		}
		extended := time.Until(info.Expires) > 30*time.Minute
		if extended != (r != "theirs") {
			t.Fatalf("%s expires in %v after the batch", r, time.Until(info.Expires))
		}
	}
	each, err = answered(ctx, t, l, lease.Unlock, d, names)
	want = []kahuna.Status{kahuna.Unlocked, kahuna.InvalidOwner, kahuna.Unlocked, kahuna.LockDoesNotExist, kahuna.Unlocked}
	if err != nil || !slices.Equal(each, want) {
		t.Fatalf("unlock batch: each %v, %v; want each %v", each, err, want)
	}
	for _, r := range append(mine, "theirs") {
		_, got, _ := getAnswered(ctx, t, node, r, d)
		if (got.Status == kahuna.Got) != (r == "theirs") {
			t.Fatalf("%s after the unlock batch: %v", r, got.Status)
		}
	}
	// Bad input changes nothing: a semaphore in a batch.
	bad := lease.Request{Op: lease.Unlock, Resource: "theirs", Also: []string{kahuna.SemaphorePrefix + "s"}, Owner: []byte("them"), Durability: d}
	if _, why := bad.Check(); !strings.Contains(why, "takes plain locks") {
		t.Fatalf("a semaphore in a batch: %q", why)
	}
	if res, err := l.Unlock(ctx, "theirs", []byte("them"), d); err != nil || res.Status != kahuna.Unlocked {
		t.Fatalf("unlock theirs: %v %v", res.Status, err)
	}
}

// getAnswered is l's Get of r, asked again while it answers MustRetry (a
// member whose leader lease is being renewed on a loaded machine).
func getAnswered(ctx context.Context, t *testing.T, l kahuna.Locker, r string, d kahuna.Durability) (kahuna.LockInfo, kahuna.Result, error) {
	t.Helper()
	for try := 0; ; try++ {
		info, res, err := l.Get(ctx, r, d)
		if err != nil || res.Status != kahuna.MustRetry || try == 100 {
			return info, res, err
		}
		time.Sleep(20 * time.Millisecond) // back off before asking again
	}
}

// answered sends a batch of op by "me" over names, and again for the
// names answered MustRetry (a leader whose lease is being renewed on a
// loaded machine), until each has another answer; the first batch's answer
// must say each name's, and the whole batch's status the first other than
// done.
func answered(ctx context.Context, t *testing.T, l kahuna.Locker, op lease.Op, d kahuna.Durability, names []string) ([]kahuna.Status, error) {
	t.Helper()
	each := make([]kahuna.Status, len(names))
	left := slices.Clone(names)
	places := make([]int, len(names))
	for i := range places {
		places[i] = i
	}
	for try := 0; len(left) > 0; try++ {
		if try == 100 {
			return each, fmt.Errorf("still MustRetry after %d tries: %v", try, left)
		}
		var res kahuna.Result
		var err error
		if len(left) == 1 {
			_, res, err = lease.Do(ctx, l, batchReq(t, op, "me", d, left[0]))
			res.Each = []kahuna.Status{res.Status}
		} else {
			_, res, err = lease.Do(ctx, l, batchReq(t, op, "me", d, left...))
		}
		if err != nil {
			return each, err
		}
		if len(res.Each) != len(left) {
			return each, fmt.Errorf("answer %v has %d statuses for %d names", res.Status, len(res.Each), len(left))
		}
		if len(left) > 1 {
			first := kahuna.Extended // the whole batch's status: the first other than done
			if op == lease.Unlock {
				first = kahuna.Unlocked
			}
			for _, s := range res.Each {
				if s != kahuna.Extended && s != kahuna.Unlocked {
					first = s
					break
				}
			}
			if res.Status != first {
				return each, fmt.Errorf("the batch's status %v, want its first name's other than done, %v (each %v)", res.Status, first, res.Each)
			}
		}
		var again []string
		var at []int
		for k, s := range res.Each {
			if s == kahuna.MustRetry {
				again, at = append(again, left[k]), append(at, places[k])
				continue
			}
			each[places[k]] = s
		}
		left, places = again, at
		if len(left) > 0 {
			time.Sleep(20 * time.Millisecond) // back off before asking again
		}
	}
	return each, nil
}

func TestBatchAnswersEachName(t *testing.T) {
	n := openElectionNode(t, kahuna.Config{Partitions: 8})
	for _, d := range []kahuna.Durability{kahuna.Persistent, kahuna.Ephemeral} {
		t.Run(d.String(), func(t *testing.T) { checkBatchAnswers(t, n, n, d) })
	}
}

// Over gRPC and REST through a member: the shares of the partitions it
// does not lead are forwarded, and every name is still answered.
func TestClusterBatchOverTheWire(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 6, steadyLeaders)
	ctx := context.Background()
	_, follower := leaderAndFollower(c, "batch/a")
	leaders := map[uint64]bool{}
	for _, r := range []string{"batch/a", "theirs", "batch-b", "nobody's", "c/d/e"} {
		leaders[c.Leader(c.Node(1).Partition(r))] = true
	}
	if len(leaders) < 2 { // batch/a's is forwarded: the follower does not lead it
		t.Fatalf("the names are led by %v: want shares for several leaders", leaders)
	}
	for _, opts := range [][]kahuna.ClientOption{nil, {kahuna.WithREST()}} {
		cl, err := kahuna.Dial(ctx, []string{c.Member(follower).Endpoint}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		for _, d := range []kahuna.Durability{kahuna.Persistent, kahuna.Ephemeral} {
			t.Run(fmt.Sprintf("%v/REST=%v", d, opts != nil), func(t *testing.T) { checkBatchAnswers(t, cl, c.Node(follower), d) })
		}
	}
}

// A renewal batch's answer is taken in lock by lock: the lock whose name
// the server no longer holds for the session is the one lost on its own
// (its cause names it), and the session and its other locks end with it.
func TestSessionBatchLossIsTheRightLock(t *testing.T) {
	ctx := context.Background()
	n := openElectionNode(t, kahuna.Config{Partitions: 8})
	link := &opCounter{WaitLocker: n, n: map[string]int{}}
	s, err := kahuna.NewSession(ctx, link, kahuna.WithTTL(sessionTTL))
	if err != nil {
		t.Fatal(err)
	}
	locks := map[string]*kahuna.Lock{}
	for _, r := range []string{"a", "b/x", "c"} { // with the session's lease, a batch of four
		lk, err := kahuna.Acquire(ctx, link, r, kahuna.WithSession(s))
		if err != nil {
			t.Fatal(err)
		}
		locks[r] = lk
	}
	// Taken from the session behind its back: the next renewal finds it gone.
	if r, err := n.Unlock(ctx, "c", []byte(s.ID()), kahuna.Persistent); err != nil || r.Status != kahuna.Unlocked {
		t.Fatalf("unlock c: %v %v", r.Status, err)
	}
	select {
	case <-locks["c"].Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("c not lost after its renewal")
	}
	var se *kahuna.StatusError
	if cause := context.Cause(locks["c"].Context()); !errors.As(cause, &se) || se.Resource != "c" || se.Status != kahuna.LockDoesNotExist {
		t.Fatalf("c's cause %v, want its extend's LockDoesNotExist", cause)
	}
	if got := link.counts(); got["Extend batch"] == 0 {
		t.Fatalf("renewals sent %v, want batches", got)
	}
	for _, r := range []string{"a", "b/x"} {
		cause := context.Cause(locks[r].Context())
		if !errors.Is(cause, kahuna.ErrSessionLost) || !strings.Contains(cause.Error(), "lock c lost") {
			t.Fatalf("%s's cause %v, want the session lost with c", r, cause)
		}
	}
}

// refusesBatches is a node behind a server that does not know batches (an
// older kahuna): a batch is InvalidInput, anything else is served.
type refusesBatches struct{ opCounter }

func (r *refusesBatches) Do(ctx context.Context, req lease.Checked) (kahuna.LockInfo, kahuna.Result, error) {
	if q := req.Request(); q.IsBatch() {
		r.count(q.Op.String() + " batch")
		return kahuna.LockInfo{}, kahuna.Result{Status: kahuna.InvalidInput, Reason: "several names are for a lock, not Extend"}, nil
	}
	return r.opCounter.Do(ctx, req)
}

// A session whose Locker cannot take a batch (not a Doer: a plain Kahuna
// server's client; or a server that refuses one) renews and releases
// every lock on its own, and stops offering batches after the first.
func TestSessionWithoutBatches(t *testing.T) {
	ctx := context.Background()
	n := openElectionNode(t, kahuna.Config{})
	refusing := &refusesBatches{opCounter{WaitLocker: n, n: map[string]int{}}}
	for name, l := range map[string]kahuna.Locker{"not a Doer": plainLocker{n}, "refuses batches": refusing} {
		t.Run(name, func(t *testing.T) {
			s, err := kahuna.NewSession(ctx, l, kahuna.WithTTL(sessionTTL))
			if err != nil {
				t.Fatal(err)
			}
			var locks []*kahuna.Lock
			for _, r := range []string{name + "/a", name + "/b"} {
				lk, err := kahuna.Acquire(ctx, l, r, kahuna.WithSession(s))
				if err != nil {
					t.Fatal(err)
				}
				locks = append(locks, lk)
			}
			for range 2 { // two renewals
				deadline := s.Expires()
				for s.Expires().Equal(deadline) {
					select {
					case <-s.Context().Done():
						t.Fatalf("session ended: %v", context.Cause(s.Context()))
					case <-time.After(sessionTTL / 50):
					}
				}
			}
			for _, lk := range locks {
				if err := lk.Context().Err(); err != nil {
					t.Fatalf("%s: %v", lk.Resource(), context.Cause(lk.Context()))
				}
			}
			if err := s.Close(ctx); err != nil {
				t.Fatal(err)
			}
			for _, lk := range locks {
				if _, r, _ := n.Get(ctx, lk.Resource(), kahuna.Persistent); r.Status != kahuna.LockDoesNotExist {
					t.Fatalf("%s after Close: %v", lk.Resource(), r.Status)
				}
			}
			if l == refusing {
				if got := refusing.counts(); got["Extend batch"] != 1 || got["Unlock batch"] != 0 {
					t.Fatalf("sent %v: want one batch refused, then none", got)
				}
			}
		})
	}
}
