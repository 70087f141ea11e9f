package actors

import (
	"slices"
	"sync"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
)

// recordingInvoker records the messages a mailbox hands it, in order;
// onUser, if set, runs as each user message is handled.
type recordingInvoker struct {
	mu        sync.Mutex
	handled   []any
	escalated []any
	onUser    func(msg any)
}

func (r *recordingInvoker) InvokeSystemMessage(msg any) { r.add(msg) }

func (r *recordingInvoker) InvokeUserMessage(msg any) {
	if r.onUser != nil {
		r.onUser(msg)
	}
	r.add(msg)
}

func (r *recordingInvoker) EscalateFailure(reason, _ any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.escalated = append(r.escalated, reason)
}

func (r *recordingInvoker) add(msg any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.handled = append(r.handled, msg)
}

func (r *recordingInvoker) seen() []any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.handled)
}

// heldDispatcher keeps the runs it is given until the test runs them.
type heldDispatcher struct {
	mu   sync.Mutex
	runs []func()
}

func (d *heldDispatcher) Schedule(fn func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.runs = append(d.runs, fn)
}

func (d *heldDispatcher) Throughput() int { return throughput }

func (d *heldDispatcher) take() []func() {
	d.mu.Lock()
	defer d.mu.Unlock()
	runs := d.runs
	d.runs = nil
	return runs
}

func newTestMailbox(inv actor.MessageInvoker) (*mailbox, *heldDispatcher) {
	m, d := newMailbox(), &heldDispatcher{}
	m.RegisterHandlers(inv, d)
	return m, d
}

// TestMailboxInlineRunIsBounded: a caller that finds the actor idle runs
// its message on its own goroutine, and what others queue meanwhile, but
// no more than inlineBudget messages: the rest is handed to one worker
// run, which handles it in order.
func TestMailboxInlineRunIsBounded(t *testing.T) {
	inv := &recordingInvoker{}
	m, d := newTestMailbox(inv)
	const others = 3 * inlineBudget
	inv.onUser = func(msg any) {
		if msg == 0 { // while the caller handles its own, others queue theirs
			inv.onUser = nil
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 1; i <= others; i++ {
					m.postInline(i) // the actor is running: queued, not run here
				}
			}()
			wg.Wait()
		}
	}
	m.postInline(0)
	if n := len(inv.seen()); n != inlineBudget {
		t.Fatalf("the caller handled %d messages on its goroutine, want the budget, %d", n, inlineBudget)
	}
	runs := d.take()
	if len(runs) != 1 {
		t.Fatalf("%d worker runs scheduled for the rest, want 1", len(runs))
	}
	runs[0]()
	want := make([]any, others+1)
	for i := range want {
		want[i] = i
	}
	if got := inv.seen(); !slices.Equal(got, want) {
		t.Fatalf("handled %v, want %v in order", got, want)
	}
	if m.status.Load() != mailboxIdle || m.UserMessageCount() != 0 {
		t.Fatalf("after the worker's run: status %d, %d queued; want idle and empty", m.status.Load(), m.UserMessageCount())
	}
	m.postInline("again") // idle again: run here, nothing scheduled
	if got := inv.seen(); got[len(got)-1] != "again" || len(d.take()) != 0 {
		t.Fatalf("an idle actor's message was not run inline: %v", got)
	}
}

// TestMailboxWorkerRunTakesInlinePosts: while a worker runs the actor, a
// caller's message is queued for that run, not run on the caller's
// goroutine (one run at a time).
func TestMailboxWorkerRunTakesInlinePosts(t *testing.T) {
	inv := &recordingInvoker{}
	m, d := newTestMailbox(inv)
	m.PostUserMessage("timer") // from a timer or Raft: to a worker
	if len(inv.seen()) != 0 {
		t.Fatal("PostUserMessage ran the actor on the poster's goroutine")
	}
	m.postInline("call")
	if len(inv.seen()) != 0 {
		t.Fatal("postInline ran the actor while a run was scheduled")
	}
	runs := d.take()
	if len(runs) != 1 {
		t.Fatalf("%d runs scheduled, want 1", len(runs))
	}
	runs[0]()
	if got := inv.seen(); !slices.Equal(got, []any{"timer", "call"}) {
		t.Fatalf("handled %v", got)
	}
}

// TestMailboxSystemFirstAndSuspension: system messages are handled before
// user ones; a suspended mailbox handles system messages only, until it
// is resumed.
func TestMailboxSystemFirstAndSuspension(t *testing.T) {
	inv := &recordingInvoker{}
	m, d := newTestMailbox(inv)
	m.PostUserMessage("u1")
	m.PostSystemMessage(&actor.SuspendMailbox{})
	m.PostSystemMessage("s1")
	for _, run := range d.take() {
		run()
	}
	if got := inv.seen(); !slices.Equal(got, []any{"s1"}) {
		t.Fatalf("suspended: handled %v, want the system message only", got)
	}
	m.postInline("u2") // suspended: queued, even though the mailbox is idle
	m.PostSystemMessage(&actor.ResumeMailbox{})
	for _, run := range d.take() {
		run()
	}
	if got := inv.seen(); !slices.Equal(got, []any{"s1", "u1", "u2"}) {
		t.Fatalf("resumed: handled %v", got)
	}
}

// TestMailboxPanicEscalates: a panic that escapes the actor is escalated
// and ends the run; the mailbox stays usable.
func TestMailboxPanicEscalates(t *testing.T) {
	inv := &recordingInvoker{}
	m, d := newTestMailbox(inv)
	inv.onUser = func(msg any) {
		if msg == "boom" {
			panic("boom")
		}
	}
	m.postInline("boom")
	if len(inv.escalated) != 1 || inv.escalated[0] != "boom" {
		t.Fatalf("escalated %v, want the panic", inv.escalated)
	}
	m.postInline("after")
	for _, run := range d.take() {
		run()
	}
	if got := inv.seen(); !slices.Equal(got, []any{"after"}) {
		t.Fatalf("after the panic: handled %v", got)
	}
}

// countingFifo counts the messages pushed through it.
type countingFifo struct {
	fifo
	pushed int
}

func (c *countingFifo) Push(msg any) { c.pushed++; c.fifo.Push(msg) }

// TestMailboxIdleEmptyRunsWithoutQueueing: a caller that finds the actor
// idle with nothing queued runs its message without queueing it; one that
// finds messages queued queues its own behind them.
func TestMailboxIdleEmptyRunsWithoutQueueing(t *testing.T) {
	inv := &recordingInvoker{}
	m, d := newTestMailbox(inv)
	user := &countingFifo{fifo: m.user}
	m.user = user
	m.postInline("alone")
	if got := inv.seen(); !slices.Equal(got, []any{"alone"}) || user.pushed != 0 {
		t.Fatalf("handled %v with %d pushed, want the message run without a push", got, user.pushed)
	}
	m.PostUserMessage("timer") // to a worker, not run yet
	m.postInline("call")
	for _, run := range d.take() {
		run()
	}
	if got := inv.seen(); !slices.Equal(got, []any{"alone", "timer", "call"}) || user.pushed != 2 {
		t.Fatalf("handled %v with %d pushed, want the call queued behind the timer's message", got, user.pushed)
	}
}

// TestMailboxSuspendedIdleQueues: a suspended mailbox, idle with nothing
// queued, does not run a caller's message: it is queued until resumed.
func TestMailboxSuspendedIdleQueues(t *testing.T) {
	inv := &recordingInvoker{}
	m, d := newTestMailbox(inv)
	m.PostSystemMessage(&actor.SuspendMailbox{})
	for _, run := range d.take() {
		run()
	}
	m.postInline("call")
	if got := inv.seen(); len(got) != 0 {
		t.Fatalf("suspended: handled %v", got)
	}
	m.PostSystemMessage(&actor.ResumeMailbox{})
	for _, run := range d.take() {
		run()
	}
	if got := inv.seen(); !slices.Equal(got, []any{"call"}) {
		t.Fatalf("resumed: handled %v, want the call", got)
	}
}
