package actors

import (
	"runtime"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
)

// mailbox is a lock actor's mailbox: protoactor's default one (system
// messages first, user messages by priority, suspension), which also lets
// a caller run the actor on its own goroutine when the actor is idle
// (postInline). Handing every call to a worker costs a goroutine
// hand-off each way, and a profile of the embedded path put most of a
// lock call's time there, not in the decision. Unlike a synchronized
// dispatcher, an inline run is bounded: after inlineBudget messages the
// rest goes to a worker, so a caller that found the actor idle is never
// kept serving others while its own answer waits.
type mailbox struct {
	system, user fifo
	status       atomic.Int32 // idle or running: at most one run at a time
	sysN, userN  atomic.Int32 // messages queued
	suspended    atomic.Bool
	invoker      actor.MessageInvoker
	dispatcher   actor.Dispatcher
}

// fifo is the queue protoactor's priority mailbox uses: first in, first
// out within a priority, higher priorities first. Push may be called from
// any goroutine, Pop only by the mailbox's run.
type fifo interface {
	Push(any)
	Pop() any
}

const (
	mailboxIdle int32 = iota
	mailboxRunning
)

// inlineBudget bounds the messages one caller handles on its own
// goroutine: its call, and what others queued meanwhile. Each is a
// decision of a few microseconds.
const inlineBudget = 16

var _ actor.Mailbox = (*mailbox)(nil)

func newMailbox() *mailbox {
	return &mailbox{system: actor.NewPriorityMpscQueue(), user: actor.NewPriorityMpscQueue()}
}

// PostUserMessage queues msg and, if the actor is idle, schedules a run
// on a worker.
func (m *mailbox) PostUserMessage(msg any) {
	m.user.Push(msg)
	m.userN.Add(1)
	if m.status.CompareAndSwap(mailboxIdle, mailboxRunning) {
		m.dispatcher.Schedule(m.process)
	}
}

// postInline queues msg and, if the actor is idle, runs it here, on the
// caller's goroutine, with what others queue meanwhile up to
// inlineBudget messages; the rest goes to a worker. An actor idle with
// nothing queued runs msg without queueing it: a priority queue's push
// and pop were a tenth of an inline call.
func (m *mailbox) postInline(msg any) {
	if m.runInline(msg) {
		return
	}
	m.user.Push(msg)
	m.userN.Add(1)
	if m.status.CompareAndSwap(mailboxIdle, mailboxRunning) {
		m.runHere(nil) // else a run under way takes it
	}
}

// runInline runs msg here, as postInline does, if the actor is idle with
// nothing queued and not suspended, and reports whether it did; if not,
// msg is not posted. When it reports true, msg was handled before it
// returned.
func (m *mailbox) runInline(msg any) bool {
	if m.userN.Load() != 0 || m.sysN.Load() != 0 || !m.status.CompareAndSwap(mailboxIdle, mailboxRunning) {
		return false
	}
	// Read only with the mailbox taken: a run changes it.
	if m.suspended.Load() {
		if m.settle() {
			m.dispatcher.Schedule(m.process)
		}
		return false
	}
	m.runHere(msg)
	return true
}

// runHere is postInline's run, the mailbox taken: first (unless nil),
// then what is queued, up to inlineBudget messages.
func (m *mailbox) runHere(first any) {
	budget := inlineBudget
	for {
		n, more := m.runFirst(budget, first)
		first = nil
		budget -= n
		if more {
			break
		}
		if !m.settle() {
			return
		}
		if budget <= 0 {
			break
		}
	}
	m.dispatcher.Schedule(m.process)
}

// PostSystemMessage queues msg (a stop, a watch, a failure) and, if the
// actor is idle, schedules a run on a worker.
func (m *mailbox) PostSystemMessage(msg any) {
	m.system.Push(msg)
	m.sysN.Add(1)
	if m.status.CompareAndSwap(mailboxIdle, mailboxRunning) {
		m.dispatcher.Schedule(m.process)
	}
}

func (m *mailbox) RegisterHandlers(invoker actor.MessageInvoker, dispatcher actor.Dispatcher) {
	m.invoker, m.dispatcher = invoker, dispatcher
}

func (m *mailbox) Start() {}

func (m *mailbox) UserMessageCount() int { return int(m.userN.Load()) }

// process is a worker's run: until the mailbox is empty (or suspended),
// yielding the processor every Throughput messages.
func (m *mailbox) process() {
	for {
		for {
			if _, more := m.run(m.dispatcher.Throughput()); !more {
				break
			}
			runtime.Gosched()
		}
		if !m.settle() {
			return
		}
	}
}

// settle marks the mailbox idle and reports whether it took it back for
// another run, because messages arrived as the last run ended.
func (m *mailbox) settle() bool {
	m.status.Store(mailboxIdle)
	if m.sysN.Load() > 0 || !m.suspended.Load() && m.userN.Load() > 0 {
		return m.status.CompareAndSwap(mailboxIdle, mailboxRunning)
	}
	return false
}

// run handles up to budget messages, system ones first, and reports how
// many it handled and whether it stopped for the budget (more may be
// queued). A panic that escapes the actor is escalated, as protoactor's
// mailbox does, and ends the run.
func (m *mailbox) run(budget int) (n int, more bool) { return m.runFirst(budget, nil) }

// runFirst is run, handling first (a user message never queued, unless
// nil) before the queued ones. It was posted when the mailbox was idle
// and empty: whatever was queued since came after it. A suspended
// mailbox queues it instead.
func (m *mailbox) runFirst(budget int, first any) (n int, more bool) {
	var msg any
	defer func() {
		if r := recover(); r != nil {
			m.invoker.EscalateFailure(r, msg)
		}
	}()
	if first != nil {
		if m.suspended.Load() {
			m.user.Push(first)
			m.userN.Add(1)
		} else {
			msg = first
			n++
			m.invoker.InvokeUserMessage(msg)
		}
	}
	for ; n < budget; n++ {
		if msg = m.system.Pop(); msg != nil {
			m.sysN.Add(-1)
			switch msg.(type) {
			case *actor.SuspendMailbox:
				m.suspended.Store(true)
			case *actor.ResumeMailbox:
				m.suspended.Store(false)
			default:
				m.invoker.InvokeSystemMessage(msg)
			}
			continue
		}
		if m.suspended.Load() {
			return n, false
		}
		if m.userN.Load() == 0 {
			return n, false // what is being queued now is seen by settle
		}
		if msg = m.user.Pop(); msg == nil {
			return n, false
		}
		m.userN.Add(-1)
		m.invoker.InvokeUserMessage(msg)
	}
	return n, true
}
