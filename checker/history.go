package checker

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kahunago/kahuna/lease"
)

// Kind is the operation of a history entry.
type Kind uint8

const (
	Acquire Kind = iota // TryLock
	Extend
	Release // Unlock
	Get
	// Reign is not a call but an event: a node began to serve the
	// resource's partition in a new Raft term (see Recorder.Reign).
	Reign
	// Hold is not a call but what a holder believed: a client that held
	// the lock through a handle (kahuna.Lock) acted as its holder over
	// [Call, Return] (see Recorder.Hold). Only the exclusion checker reads
	// it.
	Hold
)

func (k Kind) String() string {
	switch k {
	case Acquire:
		return "acquire"
	case Extend:
		return "extend"
	case Release:
		return "release"
	case Get:
		return "get"
	case Reign:
		return "reign"
	case Hold:
		return "hold"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Outcome says what a history entry proves.
type Outcome uint8

const (
	// OK: the operation took effect with the recorded status (Locked,
	// Extended, Unlocked, Got).
	OK Outcome = iota
	// Fail: the operation definitely had no effect (Busy, InvalidOwner,
	// LockDoesNotExist, InvalidInput).
	Fail
	// Indeterminate: the outcome is unknown (a timeout, a transport or
	// call error, Errored, MustRetry, WaitingForReplication, Aborted): it
	// may take effect at any time after its call, even after the caller
	// saw the error.
	Indeterminate
)

func (o Outcome) String() string {
	switch o {
	case OK:
		return "ok"
	case Fail:
		return "fail"
	case Indeterminate:
		return "info"
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// Classify maps a call's answer to an Outcome, as Jepsen's Kahuna client
// does, for any server speaking the protocol. An error makes it
// Indeterminate (a request may have been sent before the error) unless it
// wraps lease.ErrNotApplied; MustRetry is Indeterminate too, because
// Kahuna's own nodes answer it for a forwarded request whose answer was
// lost. kahuna promises more (MustRetry = certainly not applied); a harness that checks that promise classifies MustRetry as Fail
// itself, as the fault tests do.
func Classify(status lease.Status, err error) Outcome {
	if err != nil {
		if errors.Is(err, lease.ErrNotApplied) {
			return Fail
		}
		return Indeterminate
	}
	switch status {
	case lease.Locked, lease.Extended, lease.Unlocked, lease.Got:
		return OK
	case lease.Busy, lease.InvalidOwner, lease.LockDoesNotExist, lease.InvalidInput:
		return Fail
	}
	return Indeterminate
}

// Op is one call in a history, or a Reign event, or a Hold.
//
// A Reign (Kind Reign) records that Node began to serve the partition of
// Resource as its leader in Raft term Token (0: unknown), at one instant
// of [Call, Return] (the instants the recorder last saw it not serving in
// that term, and first saw it serving). It is a real leader change: a new
// reign, not a node's view of who leads. With Ephemeral set the resource's
// locks live in the leader's memory: the reign ends every hold of the
// resource and its tokens restart (the linearizability, exclusion and
// fencing checkers allow that across a reign, and only across one). For
// every resource, the stale-leader checker flags an answer from a node
// whose reign had been superseded before the call.
//
// A Hold (Kind Hold) records that Client acted as Owner's holder of
// Resource, with token Token, from Call (the grant's return) to Return
// (the handle's deadline as it stood when the holder stopped, or the
// instant it stopped, whichever came first). The exclusion checker
// compares it, as a hold window, with every other owner's. It is no
// operation: the other checkers skip it.
type Op struct {
	ID     int    // index in the history
	Client int    // the calling client (a sequential process)
	Node   uint64 // the node asked (a Reign: the leader)
	// Local: the call went to Node's own, non-forwarding Locker, so a
	// definite answer came from Node itself.
	Local bool
	// Ephemeral: a call on an ephemeral lock, or a Reign that ends the
	// resource's ephemeral locks.
	Ephemeral bool
	// Grace, on an ephemeral Reign: the new leader waited out every
	// ephemeral lease of earlier leaders before it began, so the reign
	// ends only holds that have lapsed (a hold that must still be live
	// then is a violation), and does not cut hold windows.
	Grace    bool
	Kind     Kind
	Resource string
	Owner    string        // acquire/extend/release
	TTL      time.Duration // acquire/extend
	// Call and Return are monotonic times since the recorder started.
	// Return is meaningless for Indeterminate operations: they may take
	// effect at any time after Call.
	Call, Return time.Duration
	Outcome      Outcome
	Status       lease.Status
	Token        int64  // Locked, Extended, Got
	Holder       string // Got: the owner reported
	Err          string // the call's error, if any
}

// Returned is the operation's return time, or +∞ when it is Indeterminate.
func (o *Op) Returned() time.Duration {
	if o.Outcome == Indeterminate {
		return math.MaxInt64
	}
	return o.Return
}

func (o Op) String() string {
	var b strings.Builder
	if o.Kind == Reign {
		fmt.Fprintf(&b, "#%d reign %s node=%d term=%d [%v, %v]", o.ID, o.Resource, o.Node, o.Token, o.Call, o.Return)
		if o.Ephemeral {
			b.WriteString(" (ephemeral locks lost)")
		}
		return b.String()
	}
	if o.Kind == Hold {
		fmt.Fprintf(&b, "#%d c%d hold %s owner=%s token=%d [%v, %v] (as its holder believed)", o.ID, o.Client, o.Resource, o.Owner, o.Token, o.Call, o.Return)
		return b.String()
	}
	fmt.Fprintf(&b, "#%d c%d %s %s", o.ID, o.Client, o.Kind, o.Resource)
	if o.Owner != "" {
		fmt.Fprintf(&b, " owner=%s", o.Owner)
	}
	if o.TTL > 0 {
		fmt.Fprintf(&b, " ttl=%v", o.TTL)
	}
	fmt.Fprintf(&b, " [%v, ", o.Call)
	if o.Outcome == Indeterminate {
		b.WriteString("∞)")
	} else {
		fmt.Fprintf(&b, "%v]", o.Return)
	}
	fmt.Fprintf(&b, " → %s %s", o.Outcome, o.Status)
	switch {
	case o.Kind == Get && o.Status == lease.Got:
		fmt.Fprintf(&b, " holder=%s token=%d", o.Holder, o.Token)
	case o.Status == lease.Locked || o.Status == lease.Extended:
		fmt.Fprintf(&b, " token=%d", o.Token)
	}
	if o.Err != "" {
		fmt.Fprintf(&b, " err=%q", o.Err)
	}
	if o.Node != 0 {
		fmt.Fprintf(&b, " node=%d", o.Node)
		if o.Local {
			b.WriteString(" (local)")
		}
	}
	return b.String()
}

// History is a list of operations. IDs are indexes.
type History []Op

// Stats counts a history's operations by outcome, and its Reign events
// and Holds (which are not operations).
type Stats struct {
	Ops, OK, Fail, Indeterminate int
	Reigns, Holds                int
}

// Stats counts h's operations.
func (h History) Stats() Stats {
	var s Stats
	for i := range h {
		if h[i].Kind == Reign {
			s.Reigns++
			continue
		}
		if h[i].Kind == Hold {
			s.Holds++
			continue
		}
		s.Ops++
		switch h[i].Outcome {
		case OK:
			s.OK++
		case Fail:
			s.Fail++
		default:
			s.Indeterminate++
		}
	}
	return s
}

// String prints one operation a line, in call order.
func (h History) String() string {
	ops := slices.Clone(h)
	slices.SortStableFunc(ops, func(a, b Op) int { return cmpDur(a.Call, b.Call) })
	var b strings.Builder
	for _, o := range ops {
		b.WriteString(o.String())
		b.WriteByte('\n')
	}
	return b.String()
}

func cmpDur(a, b time.Duration) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Recorder collects a History from concurrent clients.
type Recorder struct {
	start time.Time
	mu    sync.Mutex
	ops   []Op
}

// NewRecorder starts a recorder; its times count from now on the
// monotonic clock.
func NewRecorder() *Recorder { return &Recorder{start: time.Now()} }

// Now is the recorder's current time.
func (r *Recorder) Now() time.Duration { return time.Since(r.start) }

// Pending is a call in flight.
type Pending struct {
	r  *Recorder
	op Op
}

// Begin records the invocation of op (its Call and ID are set here).
func (r *Recorder) Begin(op Op) *Pending {
	op.Call = r.Now()
	return &Pending{r: r, op: op}
}

// End records the answer of a lock call: status and token for TryLock,
// Extend, Unlock; err the call's error.
func (p *Pending) End(status lease.Status, token int64, err error) Op {
	return p.EndGet(status, token, "", err)
}

// EndGet records the answer of a Get (holder is the reported owner).
func (p *Pending) EndGet(status lease.Status, token int64, holder string, err error) Op {
	return p.EndOutcome(Classify(status, err), status, token, holder, err)
}

// EndOutcome records an answer whose outcome the caller knows better than
// Classify: e.g. MustRetry from the partition leader itself, which did not
// forward the request and promises it was not committed, is Fail.
func (p *Pending) EndOutcome(outcome Outcome, status lease.Status, token int64, holder string, err error) Op {
	op := p.op
	op.Return = p.r.Now()
	op.Status = status
	op.Token = token
	op.Holder = holder
	op.Outcome = outcome
	if err != nil {
		op.Err = err.Error()
	}
	p.r.mu.Lock()
	op.ID = len(p.r.ops)
	p.r.ops = append(p.r.ops, op)
	p.r.mu.Unlock()
	return op
}

// Reign records a Reign event: node began to serve resource's partition
// in Raft term term (0: unknown) at an instant of [from, to], recorder
// times. ephemeral says the resource's locks are ephemeral (lost with the
// reign).
func (r *Recorder) Reign(resource string, node, term uint64, from, to time.Duration, ephemeral bool) Op {
	return r.add(Op{Kind: Reign, Resource: resource, Node: node, Token: int64(term), Call: from, Return: to, Outcome: OK, Ephemeral: ephemeral})
}

// GraceReign records the Reign of a leader that waited out every earlier
// ephemeral lease of resource's partition before it began (Op.Grace).
func (r *Recorder) GraceReign(resource string, node, term uint64, from, to time.Duration) Op {
	return r.add(Op{Kind: Reign, Resource: resource, Node: node, Token: int64(term), Call: from, Return: to, Outcome: OK, Ephemeral: true, Grace: true})
}

// Hold records that client acted as owner's holder of resource, granted
// token, over [from, to] (recorder times): from the grant's return to the
// earlier of the instant it stopped acting (its Unlock's call, or the loss
// it saw) and its handle's deadline then (see At). The exclusion checker
// finds any other owner's hold window that overlaps it.
func (r *Recorder) Hold(client int, resource, owner string, token int64, ephemeral bool, from, to time.Duration) Op {
	return r.add(Op{Kind: Hold, Client: client, Resource: resource, Owner: owner, Token: token, Ephemeral: ephemeral, Call: from, Return: to, Outcome: OK})
}

// At is t as a recorder time (a handle's deadline, say), on the monotonic
// clock.
func (r *Recorder) At(t time.Time) time.Duration { return t.Sub(r.start) }

func (r *Recorder) add(op Op) Op {
	r.mu.Lock()
	op.ID = len(r.ops)
	r.ops = append(r.ops, op)
	r.mu.Unlock()
	return op
}

// History returns a copy of what was recorded so far.
func (r *Recorder) History() History {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ops)
}

// Options tune the checkers.
type Options struct {
	// Margin absorbs the difference between the service's lease clock and
	// the recorder's (rounding of expiries to milliseconds, clock rates).
	// A lease is assumed to last at least TTL − Margin from its grant's
	// call, and at most TTL + Margin from its grant's return.
	Margin time.Duration
	// Timeout bounds the linearizability search (0: 1 minute). A search
	// that times out is Unknown, which is not a pass.
	Timeout time.Duration
	// VisualizePath, if set, is where CheckLinearizable writes porcupine's
	// HTML visualization when the history is not linearizable.
	VisualizePath string
}

// DefaultMargin is the Margin used when Options.Margin is 0.
const DefaultMargin = 50 * time.Millisecond

func (o Options) margin() time.Duration {
	if o.Margin <= 0 {
		return DefaultMargin
	}
	return o.Margin
}

// Violation is one finding of a checker.
type Violation struct {
	Checker string // "linearizability", "exclusion", "fencing", "stale-leader"
	Kind    string // e.g. "overlap", "token-went-backwards"
	Text    string
	Ops     []Op // the operations involved
}

func (v Violation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s: %s", v.Checker, v.Kind, v.Text)
	for _, o := range v.Ops {
		b.WriteString("\n\t")
		b.WriteString(o.String())
	}
	return b.String()
}

// Report is the verdict of every checker on one history.
type Report struct {
	Stats        Stats
	Linearizable LinearizabilityResult
	Exclusion    []Violation
	Fencing      []Violation
	StaleLeader  []Violation // definite answers from a node whose reign was over (see CheckStaleLeader)
	HoldWindows  int         // definite hold windows the exclusion checker built
	FencedGrants int         // definite grants the fencing checker compared
}

// Violations counts the findings of all checkers (an Unknown
// linearizability verdict counts as one: it is not a pass). A run that
// must be clean fails on Violations() > 0.
func (r Report) Violations() int {
	n := len(r.Exclusion) + len(r.Fencing) + len(r.StaleLeader)
	if r.Linearizable.Result != Linearizable {
		n++
	}
	return n
}

// Definite counts the findings that are certain: every exclusion, fencing
// and stale-leader violation, and one for a history found not
// linearizable. An Unknown verdict (the search timed out) is not one: it
// is neither a pass nor a finding. A negative control, which must see its
// bug, is caught only by Definite() > 0; a report with Definite() == 0
// and Undecided() is not clean either (see Recheck).
func (r Report) Definite() int {
	n := len(r.Exclusion) + len(r.Fencing) + len(r.StaleLeader)
	if r.Linearizable.Result == NotLinearizable {
		n++
	}
	return n
}

// Undecided reports whether the linearizability search timed out on some
// resource: that resource was found neither linearizable nor not.
func (r Report) Undecided() bool { return len(r.Linearizable.Undecided) > 0 }

// Err is nil when every checker passed, else a summary of what failed
// (an Unknown linearizability verdict included).
func (r Report) Err() error {
	var errs []error
	if r.Linearizable.Result != Linearizable {
		errs = append(errs, r.linearizabilityErr())
	}
	return errors.Join(append(errs, r.definiteErrs()...)...)
}

// DefiniteErr is nil when the report has no definite finding (Definite()
// == 0), else a summary of them: Err without an Unknown verdict.
func (r Report) DefiniteErr() error {
	var errs []error
	if r.Linearizable.Result == NotLinearizable {
		errs = append(errs, r.linearizabilityErr())
	}
	return errors.Join(append(errs, r.definiteErrs()...)...)
}

func (r Report) linearizabilityErr() error {
	l := r.Linearizable
	if len(l.Undecided) > 0 && l.Result == NotLinearizable {
		return fmt.Errorf("linearizability: %s (resources %v; the search timed out on %v)", l.Result, l.Failed, l.Undecided)
	}
	return fmt.Errorf("linearizability: %s (resources %v)", l.Result, l.Failed)
}

func (r Report) definiteErrs() []error {
	var errs []error
	for _, vs := range [][]Violation{r.Exclusion, r.Fencing, r.StaleLeader} {
		for _, v := range vs {
			errs = append(errs, errors.New(v.String()))
		}
	}
	return errs
}

// Recheck searches again, with opts (give it a longer Timeout), the
// resources of h whose linearizability search timed out in r, and returns
// r with their verdicts in: the other resources' verdicts and the other
// checkers' findings stay as they were. A report with no such resource is
// returned as it is.
func (r Report) Recheck(h History, opts Options) Report {
	lin := r.Linearizable
	if len(lin.Undecided) == 0 {
		return r
	}
	again := make(map[string]bool, len(lin.Undecided))
	for _, k := range lin.Undecided {
		again[k] = true
	}
	var sub History
	for _, o := range h {
		if again[o.Resource] {
			sub = append(sub, o)
		}
	}
	res := CheckLinearizable(sub, opts)
	failed := slices.DeleteFunc(slices.Clone(lin.Failed), func(k string) bool { return again[k] })
	lin.Failed = slices.Sorted(slices.Values(append(failed, res.Failed...)))
	lin.Undecided = res.Undecided
	lin.Elapsed += res.Elapsed
	switch {
	case lin.Result == NotLinearizable || res.Result == NotLinearizable:
		lin.Result = NotLinearizable
	case len(lin.Undecided) > 0:
		lin.Result = Unknown
	default:
		lin.Result = Linearizable
	}
	r.Linearizable = lin
	return r
}

// Check runs every checker on h.
func Check(h History, opts Options) Report {
	r := Report{Stats: h.Stats()}
	r.Linearizable = CheckLinearizable(h, opts)
	var windows, grants int
	r.Exclusion, windows = checkExclusion(h, opts)
	r.Fencing, grants = checkFencing(h)
	r.StaleLeader = CheckStaleLeader(h)
	r.HoldWindows, r.FencedGrants = windows, grants
	return r
}
