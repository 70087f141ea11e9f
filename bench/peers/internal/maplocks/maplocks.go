// Package maplocks is the lock service of the ephemeral floors: lock names
// held in a mutex-guarded map, asked for in a fixed binary format, with
// nothing else a lock service needs (leases, fencing tokens, auth,
// metrics, lock actors). The floors differ only in how requests and
// answers cross between the processes.
package maplocks

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kahunago/kahuna/bench/peers/internal/closedloop"
)

// A request is [caller u32][op u8][name u32]; its answer [caller u32][status u8].
const (
	ReqLen = 9
	AnsLen = 5

	OpTryLock byte = 'L'
	OpUnlock  byte = 'U'

	StatusDone byte = 1 // locked, or unlocked
	StatusBusy byte = 2 // held by another caller, or not held by this one
)

// AppendRequest appends caller's request op on name to b.
func AppendRequest(b []byte, caller uint32, op byte, name uint32) []byte {
	b = binary.BigEndian.AppendUint32(b, caller)
	b = append(b, op)
	return binary.BigEndian.AppendUint32(b, name)
}

// Answer splits an answer into its caller and status.
func Answer(m []byte) (caller uint32, status byte) {
	return binary.BigEndian.Uint32(m), m[4]
}

// Table is the server's state: each held name and its holder.
type Table struct {
	mu     sync.Mutex
	holder map[string]uint32
	name   []byte // scratch, under mu
	forget bool
}

// NewTable returns an empty table. One made to forget never records a
// grant: a test's negative control, which the callers must catch.
func NewTable(forget bool) *Table {
	return &Table{holder: map[string]uint32{}, forget: forget}
}

// Decide decides every whole request in reqs under one hold of the mutex,
// appends their answers to out, and returns out and how many bytes of
// reqs it used.
func (t *Table) Decide(out, reqs []byte) (_ []byte, used int) {
	used = len(reqs) - len(reqs)%ReqLen
	t.mu.Lock()
	defer t.mu.Unlock()
	for req := reqs[:used]; len(req) > 0; req = req[ReqLen:] {
		id := binary.BigEndian.Uint32(req)
		// A name as a lock service gets it: a string, hashed by the map.
		t.name = strconv.AppendUint(append(t.name[:0], "lock-"...), uint64(binary.BigEndian.Uint32(req[5:])), 10)
		status := StatusDone
		switch holder, held := t.holder[string(t.name)]; {
		case req[4] == OpTryLock && held:
			status = StatusBusy
		case req[4] == OpTryLock:
			if !t.forget {
				t.holder[string(t.name)] = id
			}
		case held && holder == id:
			delete(t.holder, string(t.name))
		default:
			status = StatusBusy
		}
		out = binary.BigEndian.AppendUint32(out, id)
		out = append(out, status)
	}
	return out, used
}

// Workload is the callers' side: each op TryLocks a name picked at random
// among Names and, if granted, Unlocks it, as kahuna-bench's lock workload
// does, counting what the answers say.
type Workload struct {
	Names int
	busy  atomic.Int64 // TryLocks answered Busy
	wrong atomic.Int64 // Unlocks of a lock the caller held answered Busy
}

// Op runs one op for c through call, which sends c's request and waits for
// its answer (false: the connection broke).
func (w *Workload) Op(c *closedloop.Caller, call func(op byte, name uint32) (status byte, ok bool)) bool {
	name := uint32(rand.IntN(w.Names))
	t := time.Now()
	s, ok := call(OpTryLock, name)
	if !ok {
		return false
	}
	if s == StatusBusy {
		w.busy.Add(1)
	} else {
		if s, ok = call(OpUnlock, name); !ok {
			return false
		}
		if s != StatusDone {
			w.wrong.Add(1)
		}
	}
	c.Record(time.Since(t))
	return true
}

// Result is one run's ops and their latencies.
type Result struct {
	What           string // how requests crossed, for the report's line
	Callers, Conns int
	Duration       time.Duration
	Latencies      []time.Duration // per op (TryLock and Unlock), sorted
	Busy           int64           // TryLocks answered Busy over the whole run
	Wrong          int64           // Unlocks of a lock the caller held answered Busy
}

// Result returns the run's result from w's counts.
func (w *Workload) Result(what string, callers, conns int, d time.Duration, latencies []time.Duration) Result {
	return Result{What: what, Callers: callers, Conns: conns, Duration: d, Latencies: latencies,
		Busy: w.busy.Load(), Wrong: w.wrong.Load()}
}

func (r Result) String() string {
	line := fmt.Sprintf("mutex-guarded map over %s, %d callers on %d connections, %v: %.0f ops/s (a TryLock and an Unlock each), op p50 %v p99 %v, %d TryLocks busy",
		r.What, r.Callers, r.Conns, r.Duration, float64(len(r.Latencies))/r.Duration.Seconds(),
		closedloop.Quantile(r.Latencies, 0.5), closedloop.Quantile(r.Latencies, 0.99), r.Busy)
	if r.Wrong > 0 {
		line += fmt.Sprintf("; WRONG: %d Unlocks of a held lock refused", r.Wrong)
	}
	return line
}

// Deliver returns a reader's delivery of each answer to its caller's
// channel in answers, refusing an answer for a caller that is not there.
func Deliver(answers []chan byte) func(m []byte) error {
	return func(m []byte) error {
		id, status := Answer(m)
		if int(id) >= len(answers) {
			return fmt.Errorf("server answered for caller %d of %d", id, len(answers))
		}
		answers[id] <- status
		return nil
	}
}
