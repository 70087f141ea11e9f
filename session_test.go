package kahuna_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
)

const sessionTTL = 300 * time.Millisecond

// holder reads who holds resource now ("" for nobody).
func holder(t *testing.T, n *kahuna.Node, resource string) (string, int64) {
	t.Helper()
	info, r, err := n.Get(context.Background(), resource, kahuna.Persistent)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != kahuna.Got {
		return "", -1
	}
	return string(info.Owner), info.FencingToken
}

// TestSessionRenewsItsLocks: a session keeps its locks alive for many
// TTLs with no keepalive of their own; Close ends every lock's Context
// (ErrSessionClosed, matching ErrReleased) before its release is sent,
// and releases them all and the session.
func TestSessionRenewsItsLocks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := openElectionNode(t, kahuna.Config{})
	link := &cutLocker{WaitLocker: n}
	s, err := kahuna.NewSession(ctx, link, kahuna.WithTTL(sessionTTL))
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"a", "b/x", "c"}
	locks := map[string]*kahuna.Lock{}
	for _, r := range names {
		lk, err := kahuna.Acquire(ctx, link, r, kahuna.WithSession(s), kahuna.WithTTL(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		locks[r] = lk
	}
	time.Sleep(4 * sessionTTL)
	for _, r := range names {
		if owner, _ := holder(t, n, r); owner != s.ID() {
			t.Fatalf("%s held by %q after 4 TTLs, want the session %s", r, owner, s.ID())
		}
		if err := locks[r].Context().Err(); err != nil {
			t.Fatalf("%s's Context ended: %v", r, context.Cause(locks[r].Context()))
		}
		if d, _ := locks[r].Context().Deadline(); time.Until(d) > sessionTTL {
			t.Fatalf("%s's deadline is %v away: the session's TTL is %v, not WithTTL's", r, time.Until(d), sessionTTL)
		}
	}
	if owner, _ := holder(t, n, kahuna.SessionPrefix+s.ID()); owner != s.ID() {
		t.Fatalf("the session's own lease is held by %q", owner)
	}

	var mu sync.Mutex
	liveAtRelease := 0
	link.onUnlock = func() {
		mu.Lock()
		defer mu.Unlock()
		for _, lk := range locks {
			if lk.Context().Err() == nil {
				liveAtRelease++
			}
		}
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if liveAtRelease > 0 {
		t.Fatalf("%d lock Contexts were live when a release was sent", liveAtRelease)
	}
	for _, r := range append(names, kahuna.SessionPrefix+s.ID()) {
		if owner, _ := holder(t, n, r); owner != "" {
			t.Fatalf("%s still held by %q after Close", r, owner)
		}
	}
	for r, lk := range locks {
		if cause := context.Cause(lk.Context()); !errors.Is(cause, kahuna.ErrSessionClosed) || !errors.Is(cause, kahuna.ErrReleased) {
			t.Fatalf("%s's cause %v, want ErrSessionClosed (an ErrReleased)", r, cause)
		}
	}
	if _, err := kahuna.Acquire(ctx, n, "d", kahuna.WithSession(s)); !errors.Is(err, kahuna.ErrSessionClosed) {
		t.Fatalf("Acquire on a closed session: %v, want ErrSessionClosed", err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestSessionLostTakesItsLocks: a session whose renewals stop getting
// through is lost at its deadline, and so is every lock it holds; each
// frees itself on the server by its TTL, for another owner to take.
func TestSessionLostTakesItsLocks(t *testing.T) {
	ctx := context.Background()
	n := openElectionNode(t, kahuna.Config{})
	link := &cutLocker{WaitLocker: n}
	s, err := kahuna.NewSession(ctx, link, kahuna.WithTTL(sessionTTL), kahuna.WithDurability(kahuna.Ephemeral))
	if err != nil {
		t.Fatal(err)
	}
	var locks []*kahuna.Lock
	for _, r := range []string{"a", "b"} {
		lk, err := kahuna.Acquire(ctx, link, r, kahuna.WithSession(s))
		if err != nil {
			t.Fatal(err)
		}
		locks = append(locks, lk)
	}
	// A campaign waiting in the session aborts when the session is lost.
	other, err := kahuna.Campaign(ctx, n, "jobs", []byte("other"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Resign(ctx)
	campaign := campaignAsync(ctx, link, "jobs", "mine", kahuna.WithSession(s))
	waitQueued(t, n, 1)

	link.cut.Store(true)
	select {
	case <-s.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the session outlived its cut link")
	}
	if cause := context.Cause(s.Context()); !errors.Is(cause, kahuna.ErrSessionLost) || !errors.Is(cause, kahuna.ErrLockLost) {
		t.Fatalf("session's cause %v, want ErrSessionLost", cause)
	}
	for _, lk := range locks {
		if !errors.Is(context.Cause(lk.Context()), kahuna.ErrLockLost) {
			t.Fatalf("%s's Context: %v after the session was lost", lk.Resource(), context.Cause(lk.Context()))
		}
	}
	if r := <-campaign; !errors.Is(r.err, kahuna.ErrSessionLost) {
		t.Fatalf("campaign in a lost session: %v, want ErrSessionLost", r.err)
	}
	for _, lk := range locks {
		next, err := kahuna.Acquire(ctx, n, lk.Resource(), kahuna.WithDurability(kahuna.Ephemeral), kahuna.WithWait(10*time.Second))
		if err != nil {
			t.Fatalf("%s after the session was lost: %v", lk.Resource(), err)
		}
		if next.FencingToken() <= lk.FencingToken() {
			t.Fatalf("%s: token %d after %d", lk.Resource(), next.FencingToken(), lk.FencingToken())
		}
	}
}

// TestSessionEndsWithAnyOfItsLocks: a lock whose renewals stop getting
// through while the session's own still do is lost at its deadline, and
// the session ends with it, and its other locks: while the session's
// Context is live, every lock it holds is.
func TestSessionEndsWithAnyOfItsLocks(t *testing.T) {
	ctx := context.Background()
	n := openElectionNode(t, kahuna.Config{})
	link := &cutLocker{WaitLocker: n}
	s, err := kahuna.NewSession(ctx, link, kahuna.WithTTL(sessionTTL), kahuna.WithDurability(kahuna.Ephemeral))
	if err != nil {
		t.Fatal(err)
	}
	a, err := kahuna.Acquire(ctx, link, "a", kahuna.WithSession(s))
	if err != nil {
		t.Fatal(err)
	}
	b, err := kahuna.Acquire(ctx, link, "b", kahuna.WithSession(s))
	if err != nil {
		t.Fatal(err)
	}
	one := "b"
	link.cutOne.Store(&one)
	select {
	case <-b.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("b outlived its renewals")
	}
	if err := s.Context().Err(); err == nil {
		t.Fatalf("the session is live while its lock b was lost (%v)", context.Cause(b.Context()))
	}
	if cause := context.Cause(s.Context()); !errors.Is(cause, kahuna.ErrSessionLost) {
		t.Fatalf("session's cause %v, want ErrSessionLost", cause)
	}
	if cause := context.Cause(a.Context()); !errors.Is(cause, kahuna.ErrLockLost) {
		t.Fatalf("a's Context: %v after its session was lost", cause)
	}
	if _, err := kahuna.Acquire(ctx, link, "c", kahuna.WithSession(s)); !errors.Is(err, kahuna.ErrSessionLost) {
		t.Fatalf("Acquire in the lost session: %v, want ErrSessionLost", err)
	}
}

// TestSessionResume: a process that orphans its session (or restarts)
// takes it back by ID and gets its locks back with the same tokens; a
// name it does not take back frees itself; an ID with no live session,
// or one that cannot be an ID, is refused.
func TestSessionResume(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := openElectionNode(t, kahuna.Config{})
	s, err := kahuna.NewSession(ctx, n, kahuna.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	a, err := kahuna.Acquire(ctx, n, "a", kahuna.WithSession(s))
	if err != nil {
		t.Fatal(err)
	}
	b, err := kahuna.Acquire(ctx, n, "b", kahuna.WithSession(s))
	if err != nil {
		t.Fatal(err)
	}
	lead, err := kahuna.Campaign(ctx, n, "jobs", []byte("v1"), kahuna.WithSession(s))
	if err != nil {
		t.Fatal(err)
	}
	if info, err := kahuna.Leader(ctx, n, "jobs"); err != nil || string(info.Value) != "v1" {
		t.Fatalf("Leader of a campaign in a session: %+v, %v", info, err)
	}
	s.Orphan()

	r, err := kahuna.ResumeSession(ctx, n, s.ID(), kahuna.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	a2, err := kahuna.Acquire(ctx, n, "a", kahuna.WithSession(r))
	if err != nil {
		t.Fatal(err)
	}
	if a2.FencingToken() != a.FencingToken() {
		t.Fatalf("a taken back with token %d, held with %d", a2.FencingToken(), a.FencingToken())
	}
	lead2, err := kahuna.Campaign(ctx, n, "jobs", []byte("v1"), kahuna.WithSession(r))
	if err != nil {
		t.Fatal(err)
	}
	if lead2.Epoch() != lead.Epoch() {
		t.Fatalf("leadership taken back with epoch %d, held with %d", lead2.Epoch(), lead.Epoch())
	}
	if _, err := kahuna.Acquire(ctx, n, "a", kahuna.WithSession(r)); !errors.Is(err, kahuna.ErrHeldInSession) {
		t.Fatalf("a second Acquire of one name in one session: %v, want ErrHeldInSession", err)
	}
	// b was not taken back: it frees itself when its lease ends.
	nb, err := kahuna.Acquire(ctx, n, "b", kahuna.WithWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if nb.FencingToken() != b.FencingToken()+1 {
		t.Fatalf("b after its lease ended: token %d, want %d", nb.FencingToken(), b.FencingToken()+1)
	}
	// a is still held, renewed by the resumed session.
	if owner, _ := holder(t, n, "a"); owner != s.ID() {
		t.Fatalf("a held by %q after the old lease's end, want the resumed session", owner)
	}

	if _, err := kahuna.ResumeSession(ctx, n, string(kahuna.NewOwner())); !errors.Is(err, kahuna.ErrNoSession) {
		t.Fatalf("resume of an unknown ID: %v, want ErrNoSession", err)
	}
	for _, id := range []string{"", "xyz", strings.Repeat("G", 32)} {
		var se *kahuna.StatusError
		if _, err := kahuna.ResumeSession(ctx, n, id); !errors.As(err, &se) || se.Status != kahuna.InvalidInput {
			t.Fatalf("resume of %q: %v, want InvalidInput", id, err)
		}
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := kahuna.ResumeSession(ctx, n, s.ID()); !errors.Is(err, kahuna.ErrNoSession) {
		t.Fatalf("resume of a closed session: %v, want ErrNoSession", err)
	}
	if _, err := kahuna.Leader(ctx, n, "jobs"); !errors.Is(err, kahuna.ErrNoLeader) {
		t.Fatalf("Leader after the session closed: %v, want ErrNoLeader", err)
	}
}

// TestSessionFoundGoneReleasesItsLocks: when a renewal finds the session's
// own lease gone (here an operator's unlock of session:ID), the session is
// lost and its locks, their Contexts ended first, are released at once:
// another owner gets each before the lease the last renewal gave it would
// have ended.
func TestSessionFoundGoneReleasesItsLocks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := openElectionNode(t, kahuna.Config{})
	const ttl = 3 * time.Second // renewed every second
	s, err := kahuna.NewSession(ctx, n, kahuna.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"gone/a", "gone-b/x"}
	var locks []*kahuna.Lock
	for _, r := range names {
		lk, err := kahuna.Acquire(ctx, n, r, kahuna.WithSession(s))
		if err != nil {
			t.Fatal(err)
		}
		locks = append(locks, lk)
	}
	if r, err := n.Unlock(ctx, kahuna.SessionPrefix+s.ID(), []byte(s.ID()), kahuna.Persistent); err != nil || r.Status != kahuna.Unlocked {
		t.Fatalf("unlock of the session's lease: %v %v", r, err)
	}
	select {
	case <-s.Context().Done():
	case <-time.After(2 * ttl):
		t.Fatal("the session outlived its lease's release by two TTLs")
	}
	if cause := context.Cause(s.Context()); !errors.Is(cause, kahuna.ErrSessionLost) {
		t.Fatalf("the session ended with %v, want ErrSessionLost", cause)
	}
	for i, r := range names {
		lk := locks[i]
		if lk.Context().Err() == nil {
			t.Fatalf("%s's Context is live after its session was lost", r)
		}
		// The server's lease ends no earlier than the handle's deadline.
		other, err := kahuna.Acquire(ctx, n, r, kahuna.WithOwner([]byte("other")), kahuna.WithWait(time.Until(lk.Expires())))
		if err != nil {
			t.Fatalf("%s: another owner did not get it before the lease the session last renewed (%v): %v", r, lk.Expires(), err)
		}
		if other.FencingToken() <= lk.FencingToken() {
			t.Fatalf("%s: token %d after the session's %d", r, other.FencingToken(), lk.FencingToken())
		}
		_ = other.Unlock(ctx)
	}
}
