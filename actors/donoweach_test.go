package actors

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kahunago/kahuna/lease"
)

func nowReq(op lease.Op, res, owner string) Request {
	r := Request{Request: lease.Request{Op: op, Resource: res, Owner: []byte(owner), Durability: lease.Ephemeral}, Partition: 1}
	if op == lease.TryLock {
		r.TTL = time.Minute
	}
	return r
}

// finishAll hands each request of out DoNowEach left for later to Finish
// and returns their answers by place; it fails the test if one is not
// answered within 10 s.
func finishAll(t *testing.T, r *Ring, out []NowAnswer) map[int]Response {
	t.Helper()
	type answered struct {
		j    int
		resp Response
	}
	ch := make(chan answered, len(out))
	n := 0
	for j, o := range out {
		if o.Later.Started() {
			n++
			r.Finish(context.Background(), o.Later, AnswerFunc(func(resp Response, err error) {
				if err != nil {
					t.Errorf("Finish %d: %v", j, err)
				}
				ch <- answered{j, resp}
			}))
		}
	}
	got := map[int]Response{}
	for range n {
		select {
		case a := <-ch:
			got[a.j] = a.resp
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d answers left for later not given in 10 s", n-len(got), n)
		}
	}
	return got
}

// settled waits until no run has m: a record's read is handled by a
// worker, which may still be settling the mailbox after its answer.
func settled(m *mailbox) {
	for m.status.Load() != mailboxIdle {
		runtime.Gosched()
	}
}

// take takes m as a run does, once no other run has it.
func take(m *mailbox) {
	for !m.status.CompareAndSwap(mailboxIdle, mailboxRunning) {
		runtime.Gosched()
	}
}

// DoNowEach decides each actor's share of the requests in the order
// given, on the caller's goroutine when the actor is idle: a lock taken,
// refused to another owner, released and taken by that owner, all in
// one call, and a name of another actor beside them.
func TestDoNowEachDecidesInOrder(t *testing.T) {
	f := newFixture(t, 2, 100)
	reqs := []Request{
		nowReq(lease.TryLock, "x", "a"),
		nowReq(lease.TryLock, "y", "a"),
		nowReq(lease.TryLock, "x", "b"),
		nowReq(lease.Unlock, "x", "a"),
		nowReq(lease.TryLock, "x", "b"),
	}
	// The names' first requests read their records: cache them first.
	f.do(t, lease.TryLock, "x", "warm", time.Minute, lease.Ephemeral)
	f.do(t, lease.Unlock, "x", "warm", 0, lease.Ephemeral)
	f.do(t, lease.TryLock, "y", "warm", time.Minute, lease.Ephemeral)
	f.do(t, lease.Unlock, "y", "warm", 0, lease.Ephemeral)
	for _, a := range f.ring.actors {
		settled(a.mailbox)
	}
	out := make([]NowAnswer, len(reqs))
	f.ring.DoNowEach(reqs, out)
	want := []lease.Status{lease.Locked, lease.Locked, lease.Busy, lease.Unlocked, lease.Locked}
	for j, o := range out {
		if !o.Now || o.Later.Started() || o.Resp.Status != want[j] {
			t.Errorf("request %d (%v %s by %s): %v now %v later %v, want %v now",
				j, reqs[j].Op, reqs[j].Resource, reqs[j].Owner, o.Resp.Status, o.Now, o.Later.Started(), want[j])
		}
	}
	if out[0].Resp.Token >= out[4].Resp.Token {
		t.Errorf("tokens %d then %d: the later grant's must be larger", out[0].Resp.Token, out[4].Resp.Token)
	}
}

// An actor that is not idle (a run under way on another goroutine, or
// its mailbox suspended) is posted its share, and the answers come later
// through Finish, never written where only an idle run's caller reads
// them.
func TestDoNowEachOnABusyActorAnswersLater(t *testing.T) {
	for _, tc := range []struct {
		name       string
		hold, free func(m *mailbox)
	}{
		// A run under way: the test takes the mailbox as a run does (a
		// worker may still be finishing the warm-up's), then runs it.
		{"running", take, func(m *mailbox) { go m.process() }},
		// Suspended, as only a run may suspend it.
		{"suspended", func(m *mailbox) {
			take(m)
			m.suspended.Store(true)
			if m.settle() {
				m.dispatcher.Schedule(m.process)
			}
		}, func(m *mailbox) { m.PostSystemMessage(&actor.ResumeMailbox{}) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, 1, 100)
			f.do(t, lease.TryLock, "x", "warm", time.Minute, lease.Ephemeral)
			f.do(t, lease.Unlock, "x", "warm", 0, lease.Ephemeral)
			m := f.ring.actors[0].mailbox
			tc.hold(m)
			reqs := []Request{nowReq(lease.TryLock, "x", "a"), nowReq(lease.TryLock, "x", "b")}
			out := make([]NowAnswer, len(reqs))
			f.ring.DoNowEach(reqs, out)
			for j, o := range out {
				if o.Now || !o.Later.Started() {
					t.Fatalf("request %d to a %s actor: now %v later %v, want later", j, tc.name, o.Now, o.Later.Started())
				}
			}
			tc.free(m)
			got := finishAll(t, f.ring, out)
			if got[0].Status != lease.Locked || got[1].Status != lease.Busy {
				t.Fatalf("answers %v, %v; want Locked, Busy", got[0].Status, got[1].Status)
			}
		})
	}
}
