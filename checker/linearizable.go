package checker

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/kahunago/kahuna/lease"
)

// Verdict is the linearizability checker's answer.
type Verdict string

const (
	Linearizable    Verdict = "linearizable"
	NotLinearizable Verdict = "not linearizable"
	// Unknown: the search timed out. Not a pass.
	Unknown Verdict = "unknown (search timed out)"
)

// LinearizabilityResult is CheckLinearizable's verdict.
type LinearizabilityResult struct {
	Result    Verdict
	Resources int      // partitions checked
	Failed    []string // resources that are not linearizable, or unknown
	// Undecided are the resources of Failed whose search timed out: found
	// neither linearizable nor not. Report.Recheck searches them again.
	Undecided []string
	Elapsed   time.Duration
}

// How indeterminate operations are checked. Porcupine's usual encoding of a
// "maybe" operation, a return at +∞, makes its search place the operation at
// every point of the rest of the history, in every combination with the
// other open ones: exponential in their number, and a fault leaves dozens
// open. Instead, an indeterminate operation becomes a zero-length
// registration at its call, which adds it to the state's set of pending
// effects; before each definite operation the model may apply any pending
// effects (each at most once), in any order. The histories accepted are the
// same, but the state no longer records when a pending effect was applied,
// so states that differ only in that merge, and the search stays small.

// lockState is the model's state of one resource. A lapsed lease keeps its
// holder until someone else takes the lock or the holder releases it, as
// the service does (expiry is checked lazily).
type lockState struct {
	holder string // "" = never locked, or released
	token  int64  // token of the current or last grant; -1 = never granted
	// loose: the current or last grant's token is some value from token
	// on, not yet seen (a rising model's grant, see model.rising).
	loose bool
	// expLo and expHi bound the instant (ns since the recorder's start) the
	// holder's lease ends: no earlier than its grant's (or last extend's)
	// call + TTL, no later than its return + TTL (+∞ when indeterminate).
	expLo, expHi int64
	// pending lists the indeterminate operations registered and not yet
	// applied, as sorted 4-byte big-endian indexes into the model's table.
	pending string
	// now is the latest call among the operations linearized so far: the
	// next linearization point is no earlier (points can always be chosen
	// increasing, each the latest call so far).
	now int64
	// anon lists the anonymous owners (but the holder) that may still take
	// the lock, by the signature of their pending operations (see
	// anonPrefix), sorted and joined by "|".
	anon string
}

// lockInput is an operation as the model sees it: the times are part of it,
// since whether a lease may have lapsed depends on when the operation ran.
type lockInput struct {
	register bool // an indeterminate operation's registration
	idx      int  // register: its index in the model's table
	// late: a pending effect of a persistent lock being applied
	// (model.closure). It was decided at some instant after its call, and
	// its Raft record may commit much later (its proposal timed out, and
	// it commits once replication resumes, the leader serving other calls
	// meanwhile): the lease it sets ends TTL after its decision, so no
	// earlier than call + TTL, whatever else was linearized before it. An
	// ephemeral lock's operations take effect, in the leader's memory, as
	// they are decided.
	late       bool
	kind       Kind
	owner      string
	ttl        int64
	call, ret  int64  // ret = MaxInt64 for a pending effect
	node, term uint64 // a Reign's
	grace      bool   // a Reign's (Op.Grace)
	persistent bool   // a Reign's: of a persistent resource
}

type lockOutput struct {
	status lease.Status
	token  int64
	holder string
}

func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

type option struct {
	next    lockState
	status  lease.Status
	token   int64
	atLeast bool // any token from token on is right (and becomes the state's)
	holder  string
}

// outcomes lists what operation i may do in state s, with margin widening
// the lease bounds. In a rising model a grant's token is any value above
// the last grant's, else exactly one above.
func outcomes(s lockState, i lockInput, margin int64, rising bool) []option {
	// The operation takes effect in [from, i.ret]. The lease may still be
	// live at some instant of that, or may have lapsed by some instant of it.
	// A grant or extension sets the lease to end TTL after the instant it
	// was decided: no earlier than start (a late effect's: its call).
	from := max(i.call, s.now)
	start := from
	if i.late {
		start = i.call
	}
	livePossible := s.holder != "" && satAdd(s.expHi, margin) >= from
	expiredPossible := s.holder != "" && s.expLo-margin <= i.ret
	var opts []option
	switch i.kind {
	case Acquire:
		grant := s
		grant.holder, grant.token, grant.loose = i.owner, s.token+1, rising
		grant.expLo, grant.expHi = satAdd(start, i.ttl), satAdd(i.ret, i.ttl)
		granted := option{next: grant, status: lease.Locked, token: grant.token, atLeast: rising}
		switch {
		case s.holder == "":
			opts = append(opts, granted)
		case s.holder == i.owner:
			if livePossible { // the same grant again, expiry not refreshed
				opts = append(opts, option{next: s, status: lease.Locked, token: s.token, atLeast: s.loose})
			}
			if expiredPossible {
				opts = append(opts, granted)
			}
		default:
			if livePossible {
				opts = append(opts, option{next: s, status: lease.Busy})
			}
			if expiredPossible {
				opts = append(opts, granted)
			}
		}
	case Extend:
		if s.holder == i.owner && livePossible {
			ext := s
			ext.expLo, ext.expHi = satAdd(start, i.ttl), satAdd(i.ret, i.ttl)
			opts = append(opts, option{next: ext, status: lease.Extended, token: s.token, atLeast: s.loose})
		}
		if s.holder == "" || expiredPossible {
			opts = append(opts, option{next: s, status: lease.LockDoesNotExist})
		}
		if s.holder != "" && s.holder != i.owner && livePossible {
			opts = append(opts, option{next: s, status: lease.InvalidOwner})
		}
	case Release:
		switch s.holder {
		case "":
			opts = append(opts, option{next: s, status: lease.LockDoesNotExist})
		case i.owner: // even if lapsed: the owner may release it
			free := s
			free.holder, free.expLo, free.expHi = "", 0, 0
			opts = append(opts, option{next: free, status: lease.Unlocked})
		default:
			opts = append(opts, option{next: s, status: lease.InvalidOwner})
		}
	case Get:
		if livePossible {
			opts = append(opts, option{next: s, status: lease.Got, token: s.token, atLeast: s.loose, holder: s.holder})
		}
		if s.holder == "" || expiredPossible {
			opts = append(opts, option{next: s, status: lease.LockDoesNotExist})
		}
	}
	return opts
}

func pendingIdx(p string, k int) int { return int(binary.BigEndian.Uint32([]byte(p[4*k : 4*k+4]))) }

func pendingAdd(p string, idx int) string {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(idx))
	k := len(p) / 4
	for k > 0 && pendingIdx(p, k-1) > idx {
		k--
	}
	return p[:4*k] + string(b[:]) + p[4*k:]
}

func pendingDel(p string, k int) string { return p[:4*k] + p[4*k+4:] }

// model is the per-resource model; table holds the indeterminate operations
// (as pending effects: ret = +∞) by index.
type model struct {
	margin int64
	// rising: the resource is an ephemeral lock, whose tokens rise by
	// more than one across reigns and evictions (each grant's is above
	// the last's); a persistent lock's grant takes the last token + 1.
	rising bool
	table  []lockInput
	// lastMention is, per owner, the instant the last operation of its own
	// (definite, or an indeterminate one's registration), or Get that
	// reported it as the holder, is surely linearized: its return, or its
	// call for a registration. Once an operation called later is
	// linearized, nothing but the owner's pending operations can mention it
	// again.
	lastMention map[string]int64
}

// Anonymous owners. An owner that nothing mentions any more but its pending
// operations is interchangeable with any other such owner whose pending
// operations are alike (same kinds and TTLs: their calls are all in the
// past, so where they may apply does not depend on them). The state keeps
// such owners as anonymous instances, named by the multiset of their
// pending operations (a signature such as "a2000000000;r"), instead of by
// name and operation indexes: states that differ only in which of several
// alike owners did something merge. The holder may be one (its name is
// anonPrefix + the signature of its remaining pending operations); the
// others are listed in lockState.anon.
//
// A persistent lock's grant or extension applied late sets a lease that
// ends TTL after it was decided, no earlier than TTL after its call
// (lockInput.late). While that may still be after now, its signature keeps
// its call, rounded down to sigBucket ("a2000000000@37": called in
// [3.7s, 3.8s)), which bounds the lease from below a little more loosely
// than the call itself, and lets alike owners called in the same bucket
// merge. Once the bound is surely past, the call is dropped: a lease it
// set may have ended at any instant still to come, called when it may.
const (
	anonPrefix = "\x00"
	anonOther  = "\x00\x00" // an anonymous owner that is not the holder
	sigBucket  = int64(100 * time.Millisecond)
)

func isAnon(owner string) bool { return strings.HasPrefix(owner, anonPrefix) }

// opSig describes a pending operation within a signature, as of now.
func (m *model) opSig(op lockInput, now int64) string {
	var d string
	switch op.kind {
	case Acquire:
		d = fmt.Sprintf("a%d", op.ttl)
	case Extend:
		d = fmt.Sprintf("e%d", op.ttl)
	default:
		return "r"
	}
	if b := op.call / sigBucket; !m.rising && m.leaseMayLast(b*sigBucket, op.ttl, now) {
		d += fmt.Sprintf("@%d", b)
	}
	return d
}

// leaseMayLast reports whether a lease set TTL after an instant no
// earlier than call may still last past now.
func (m *model) leaseMayLast(call, ttl, now int64) bool {
	return satAdd(call, ttl)-m.margin > now
}

func parseOpSig(d string) lockInput {
	var in lockInput
	switch d[0] {
	case 'a':
		in.kind = Acquire
	case 'e':
		in.kind = Extend
	default:
		return lockInput{kind: Release}
	}
	ttl, at, bucketed := strings.Cut(d[1:], "@")
	in.ttl, _ = strconv.ParseInt(ttl, 10, 64)
	if bucketed {
		b, _ := strconv.ParseInt(at, 10, 64)
		in.call = b * sigBucket
	}
	return in
}

// aged is sig without the calls that no longer bound anything at now.
func (m *model) aged(sig string, now int64) string {
	if !strings.Contains(sig, "@") {
		return sig
	}
	parts := splitSig(sig)
	for i, d := range parts {
		if bare, _, ok := strings.Cut(d, "@"); ok {
			if in := parseOpSig(d); !m.leaseMayLast(in.call, in.ttl, now) {
				parts[i] = bare
			}
		}
	}
	return joinSig(parts)
}

func splitSig(sig string) []string {
	if sig == "" {
		return nil
	}
	return strings.Split(sig, ";")
}

func joinSig(parts []string) string {
	slices.Sort(parts)
	return strings.Join(parts, ";")
}

// hasAcquire reports whether a signature can still take the lock.
func hasAcquire(sig string) bool {
	return slices.ContainsFunc(splitSig(sig), func(d string) bool { return d[0] == 'a' })
}

// anonList is the sorted list of anonymous instances, joined by "|".
func anonList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, "|")
}

func anonJoin(list []string) string {
	slices.Sort(list)
	return strings.Join(list, "|")
}

// normalize prunes s and moves owners nobody mentions any more into
// anonymous instances, and drops the calls of anonymous signatures that no
// longer bound anything (see sigBucket).
func (m *model) normalize(s lockState) lockState {
	if isAnon(s.holder) && strings.Contains(s.holder, "@") {
		s.holder = anonPrefix + m.aged(s.holder[len(anonPrefix):], s.now)
	}
	if strings.Contains(s.anon, "@") {
		list := anonList(s.anon)
		for i, sig := range list {
			list[i] = m.aged(sig, s.now)
		}
		s.anon = anonJoin(list)
	}
	var silent map[string][]string // owner → its pending operations' signatures
	keep := make([]byte, 0, len(s.pending))
	for k := 0; k < len(s.pending)/4; k++ {
		op := m.table[pendingIdx(s.pending, k)]
		if m.lastMention[op.owner] < s.now {
			if silent == nil {
				silent = map[string][]string{}
			}
			silent[op.owner] = append(silent[op.owner], m.opSig(op, s.now))
			continue
		}
		keep = append(keep, s.pending[4*k:4*k+4]...)
	}
	if h := s.holder; !isAnon(h) && h != "" && m.lastMention[h] < s.now {
		s.holder = anonPrefix + joinSig(silent[h])
		delete(silent, h)
	}
	if silent != nil {
		s.pending = string(keep)
		list := anonList(s.anon)
		for _, parts := range silent {
			if sig := joinSig(parts); hasAcquire(sig) {
				list = append(list, sig) // else it can never take effect
			}
		}
		s.anon = anonJoin(list)
	}
	return s
}

// closure returns s and every state reachable from it by applying pending
// effects before an operation that returns at ret (they take effect before
// it, so no later than ret).
func (m *model) closure(s lockState, ret int64) []lockState {
	out := []lockState{m.normalize(s)}
	add := func(next lockState) {
		next = m.normalize(next)
		if !slices.Contains(out, next) {
			out = append(out, next)
		}
	}
	effect := func(cur lockState, at lockInput) []lockState {
		at.ret = ret // applied before the operation: by its return
		at.late = !m.rising
		var nexts []lockState
		for _, o := range outcomes(cur, at, m.margin, m.rising) {
			if o.next.holder == cur.holder && o.next.token == cur.token && o.next.loose == cur.loose && o.next.expLo == cur.expLo && o.next.expHi == cur.expHi {
				continue // no effect: the same as not applying it
			}
			nexts = append(nexts, o.next)
		}
		return nexts
	}
	for i := 0; i < len(out); i++ {
		cur := out[i]
		// Named owners' pending operations. Once registered, those of one
		// owner, kind and TTL have the same effect wherever applied: try
		// only the first of each.
		type group struct {
			kind  Kind
			owner string
			ttl   int64
		}
		tried := map[group]bool{}
		for k := 0; k < len(cur.pending)/4; k++ {
			op := m.table[pendingIdx(cur.pending, k)]
			g := group{op.kind, op.owner, op.ttl}
			if tried[g] {
				continue
			}
			tried[g] = true
			for _, next := range effect(cur, op) {
				next.pending = pendingDel(cur.pending, k)
				add(next)
			}
		}
		// The anonymous holder's own pending operations.
		if isAnon(cur.holder) {
			parts := splitSig(cur.holder[len(anonPrefix):])
			seen := map[string]bool{}
			for j, d := range parts {
				if seen[d] {
					continue
				}
				seen[d] = true
				rest := joinSig(append(slices.Clone(parts[:j]), parts[j+1:]...))
				at := parseOpSig(d)
				at.owner = cur.holder
				for _, next := range effect(cur, at) {
					if next.holder == "" { // released: what is left of it is another instance
						if hasAcquire(rest) {
							next.anon = anonJoin(append(anonList(next.anon), rest))
						}
					} else {
						next.holder = anonPrefix + rest
					}
					add(next)
				}
			}
		}
		// Other anonymous owners' acquires: alike instances are tried once.
		list := anonList(cur.anon)
		for j, sig := range list {
			if j > 0 && list[j-1] == sig {
				continue
			}
			parts := splitSig(sig)
			seen := map[string]bool{}
			for q, d := range parts {
				if d[0] != 'a' || seen[d] {
					continue
				}
				seen[d] = true
				at := parseOpSig(d)
				at.owner = anonOther
				rest := joinSig(append(slices.Clone(parts[:q]), parts[q+1:]...))
				for _, next := range effect(cur, at) {
					next.holder = anonPrefix + rest
					next.anon = anonJoin(append(slices.Clone(list[:j]), list[j+1:]...))
					add(next)
				}
			}
		}
	}
	return out
}

// stepOne returns the states operation i (with output out) may lead to
// from s, before merging.
func (m *model) stepOne(s lockState, i lockInput, out any) []lockState {
	var next []lockState
	if i.kind == Reign && i.persistent {
		// A persistent lock outlives the reign, and the new leader gives
		// its lease at least its stored TTL from when it began serving
		// (renewals are kept in the old leader's memory): the holder keeps
		// it, its end no earlier than before, and later by as much as
		// the new leader's floor (unbounded here: only liveness depends on
		// it). Pending effects may apply before, or after.
		for _, c := range m.closure(s, i.ret) {
			if c.holder != "" {
				c.expHi = math.MaxInt64
			}
			c.now = max(c.now, i.call)
			next = append(next, m.normalize(c))
		}
		return next
	}
	if i.kind == Reign {
		// A new leader starts serving with no ephemeral lock, or, after a
		// planned move, with the old leader's live leases handed over: the
		// holder keeps its lock and token, for up to as long again as the
		// move took (unbounded here: only liveness depends on it). Pending
		// effects may apply before (in the old reign), or after.
		for _, c := range m.closure(s, i.ret) {
			if c.holder != "" {
				kept := c
				kept.expHi = math.MaxInt64
				kept.now = max(kept.now, i.call)
				next = append(next, m.normalize(kept))
			}
			if i.grace && c.holder != "" && c.expLo-m.margin > i.ret {
				continue // a hold certainly live when the new leader began: it did not wait it out
			}
			c = reset(c)
			c.now = max(c.now, i.call)
			next = append(next, m.normalize(c))
		}
		return next
	}
	if i.register {
		// Pending effects may apply before the registration, which moves
		// now on: at the registration's instant at the latest.
		for _, c := range m.closure(s, i.call) {
			c.pending = pendingAdd(c.pending, i.idx)
			c.now = max(c.now, i.call)
			next = append(next, m.normalize(c))
		}
		return next
	}
	o := out.(lockOutput)
	for _, c := range m.closure(s, i.ret) {
		for _, op := range outcomes(c, i, m.margin, m.rising) {
			if op.status != o.status {
				continue
			}
			n := op.next
			if o.status == lease.Locked || o.status == lease.Extended || o.status == lease.Got {
				switch {
				case op.atLeast && o.token >= op.token:
					n.token, n.loose = o.token, false // seen: from now on exact
				case op.token != o.token:
					continue
				}
			}
			if o.status == lease.Got && op.holder != o.holder {
				continue
			}
			n.now = max(n.now, i.call)
			next = append(next, m.normalize(n))
		}
	}
	return next
}

// reset is s after a reign change of an ephemeral resource: nobody holds
// it, and the next grant's token is above every earlier one's (the model
// of an ephemeral lock is rising). An anonymous holder's remaining pending
// operations become another anonymous instance.
func reset(s lockState) lockState {
	if isAnon(s.holder) {
		if rest := s.holder[len(anonPrefix):]; hasAcquire(rest) {
			s.anon = anonJoin(append(anonList(s.anon), rest))
		}
	}
	s.holder, s.expLo, s.expHi = "", 0, 0
	return s
}

// step is the model's step on a set of states (the model is
// nondeterministic): the union of every state's successors, merged by hull
// and sorted, so equal sets compare equal element by element.
func (m *model) step(st, in, out any) (bool, any) {
	var next []lockState
	for _, s := range st.([]lockState) {
		next = append(next, m.stepOne(s, in.(lockInput), out)...)
	}
	next = hull(next)
	return len(next) > 0, next
}

// hull merges states that differ only in their lease bounds into one with
// the widest bounds. The model only asks whether a lease may be live, or may
// have lapsed, at some instant of an operation, and both questions are
// monotone in the bounds: the merged state allows exactly what one of the
// states allowed, per operation. Without it, a pending effect applied before
// each of a run of operations would leave one state per application point.
func hull(states []lockState) []lockState {
	slices.SortFunc(states, func(a, b lockState) int {
		return cmp.Or(strings.Compare(a.holder, b.holder), strings.Compare(a.pending, b.pending),
			strings.Compare(a.anon, b.anon), cmp.Compare(a.token, b.token), cmpBool(a.loose, b.loose), cmp.Compare(a.now, b.now))
	})
	out := states[:0]
	for _, s := range states {
		if n := len(out); n > 0 {
			if l := &out[n-1]; l.holder == s.holder && l.pending == s.pending && l.anon == s.anon && l.token == s.token && l.loose == s.loose && l.now == s.now {
				l.expLo, l.expHi = min(l.expLo, s.expLo), max(l.expHi, s.expHi)
				continue
			}
		}
		out = append(out, s)
	}
	return out
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

func (m *model) porcupine() porcupine.Model {
	seed := maphash.MakeSeed()
	hashOne := func(s lockState) uint64 {
		var h maphash.Hash
		h.SetSeed(seed)
		h.WriteString(s.holder)
		h.WriteByte(0)
		h.WriteString(s.pending)
		h.WriteByte(0)
		h.WriteString(s.anon)
		maphash.WriteComparable(&h, [4]int64{s.token, s.expLo, s.expHi, s.now})
		maphash.WriteComparable(&h, s.loose)
		return h.Sum64()
	}
	describe := func(s lockState) string {
		var b strings.Builder
		token := strconv.FormatInt(s.token, 10)
		if s.loose {
			token = "≥ " + token
		}
		switch {
		case s.holder == "":
			fmt.Fprintf(&b, "free, token %s", token)
		default:
			hi := "∞"
			if s.expHi != math.MaxInt64 {
				hi = time.Duration(s.expHi).String()
			}
			holder := s.holder
			if isAnon(holder) {
				holder = "(an owner whose answers were lost)"
			}
			fmt.Fprintf(&b, "%s holds %s, expires in [%v, %s]", holder, token, time.Duration(s.expLo), hi)
		}
		if n := len(s.pending)/4 + len(anonList(s.anon)); n > 0 {
			fmt.Fprintf(&b, ", %d pending", n)
		}
		return b.String()
	}
	return porcupine.Model{
		Init: func() any { return []lockState{{token: -1, loose: m.rising}} },
		Step: m.step,
		Equal: func(a, b any) bool {
			return slices.Equal(a.([]lockState), b.([]lockState))
		},
		Hash: func(st any) uint64 {
			var h uint64
			for _, s := range st.([]lockState) {
				h = h*31 + hashOne(s)
			}
			return h
		},
		DescribeOperation: func(in, out any) string {
			i := in.(lockInput)
			if i.kind == Reign && i.persistent {
				return fmt.Sprintf("reign(node %d, term %d) → the lock kept, its lease perhaps longer", i.node, i.term)
			}
			if i.kind == Reign {
				return fmt.Sprintf("reign(node %d, term %d) → every lock lost or handed over", i.node, i.term)
			}
			s := fmt.Sprintf("%s(%s", i.kind, i.owner)
			if i.ttl > 0 {
				s += fmt.Sprintf(", %v", time.Duration(i.ttl))
			}
			s += ")"
			if i.register {
				return s + " → ? (pending)"
			}
			o := out.(lockOutput)
			s += " → " + o.status.String()
			switch o.status {
			case lease.Locked, lease.Extended:
				s += fmt.Sprintf(" %d", o.token)
			case lease.Got:
				s += fmt.Sprintf(" %s %d", o.holder, o.token)
			}
			return s
		},
		DescribeState: func(st any) string {
			var parts []string
			for _, s := range st.([]lockState) {
				parts = append(parts, describe(s))
			}
			return "{" + strings.Join(parts, "; ") + "}"
		},
	}
}

// reignClient is the porcupine client ID of the reigns of node n (plus n).
const reignClient = 1 << 20

// build turns the operations of one resource into a model and porcupine's
// history. A Reign of an ephemeral resource becomes an operation that
// resets the lock, once, somewhere in its window; of a persistent one, an
// operation that keeps the lock and lifts the bound on its lease's end. Indeterminate operations become registrations; indeterminate
// Gets, and failures that changed nothing and say nothing (MustRetry,
// InvalidInput), are left out.
func build(ops []Op, margin time.Duration) (*model, []porcupine.Operation) {
	m := &model{margin: int64(margin), lastMention: map[string]int64{}}
	out := make([]porcupine.Operation, 0, len(ops))
	sorted := slices.Clone(ops)
	slices.SortStableFunc(sorted, func(a, b Op) int { return cmpDur(a.Call, b.Call) })
	for _, o := range sorted {
		if o.Kind == Hold {
			continue // what a holder believed: the exclusion checker's
		}
		m.rising = m.rising || o.Ephemeral
		in := lockInput{kind: o.Kind, owner: o.Owner, ttl: int64(o.TTL), call: int64(o.Call), ret: int64(o.Returned())}
		// When the operation is surely linearized: after its return, or for
		// an indeterminate one after its registration at its call (its
		// effect is then pending).
		end := in.ret
		if o.Outcome == Indeterminate {
			end = in.call
		}
		mentioned := o.Owner
		if o.Kind == Get {
			mentioned = o.Holder
		}
		if mentioned != "" {
			m.lastMention[mentioned] = max(m.lastMention[mentioned], end)
		}
		switch {
		case o.Kind == Reign:
			in.node, in.term, in.grace, in.persistent = o.Node, uint64(o.Token), o.Grace, !o.Ephemeral
			out = append(out, porcupine.Operation{ClientId: reignClient + int(o.Node), Input: in, Call: in.call, Output: lockOutput{}, Return: in.ret, Metadata: o.ID})
		case o.Outcome == Indeterminate && o.Kind == Get:
			continue
		case o.Outcome == Indeterminate:
			in.register, in.idx = true, len(m.table)
			m.table = append(m.table, in)
			out = append(out, porcupine.Operation{ClientId: o.Client, Input: in, Call: in.call, Return: in.call, Metadata: o.ID})
		case o.Outcome == Fail && (o.Status == lease.MustRetry || o.Status == lease.InvalidInput || o.Err != ""):
			continue // no effect, and no answer about the lock (a Fail with an error was never sent)
		default:
			out = append(out, porcupine.Operation{
				ClientId: o.Client,
				Input:    in,
				Call:     in.call,
				Output:   lockOutput{status: o.Status, token: o.Token, holder: o.Holder},
				Return:   in.ret,
				Metadata: o.ID,
			})
		}
	}
	return m, out
}

// byResource groups h's operations by resource, resources sorted.
func byResource(h History) ([]string, map[string][]Op) {
	m := map[string][]Op{}
	for _, o := range h {
		m[o.Resource] = append(m[o.Resource], o)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys, m
}

// checkOperations is porcupine's search with a time bound (a variable so
// that a test can make it time out at will).
var checkOperations = porcupine.CheckOperationsTimeout

// visualizeTimeout bounds the search for porcupine's drawing of a history
// found not linearizable.
const visualizeTimeout = 15 * time.Second

// CheckLinearizable checks h against the lock state machine, one resource
// at a time. Indeterminate operations may take effect at any instant after
// their call, or never (on a persistent lock, with the lease they set
// counted from as early as their call: see lockInput.late). Leases lapse nondeterministically within the
// bounds of Options.Margin; TryLock on a live lock by another owner is Busy,
// a persistent lock's grants take the previous token + 1 (0 first), an
// ephemeral lock's any token above the previous one, Extend and Get see
// the current token.
func CheckLinearizable(h History, opts Options) LinearizabilityResult {
	start := time.Now()
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = time.Minute
	}
	keys, groups := byResource(h)
	res := LinearizabilityResult{Result: Linearizable, Resources: len(keys)}
	deadline := start.Add(timeout)
	var (
		illegal      []porcupine.Operation
		illegalModel porcupine.Model
	)
	for _, k := range keys {
		m, ops := build(groups[k], opts.margin())
		pm := m.porcupine()
		left := time.Until(deadline)
		if left <= 0 {
			left = time.Millisecond
		}
		switch checkOperations(pm, ops, left) {
		case porcupine.Ok:
		case porcupine.Illegal:
			res.Result = NotLinearizable
			res.Failed = append(res.Failed, k)
			if illegal == nil {
				illegal, illegalModel = ops, pm
			}
		default:
			if res.Result == Linearizable {
				res.Result = Unknown
			}
			res.Failed = append(res.Failed, k)
			res.Undecided = append(res.Undecided, k)
		}
	}
	if illegal != nil && opts.VisualizePath != "" {
		// The verbose run computes the partial linearizations to draw; it
		// may search as long again, so it gets less time (a drawing cut
		// short still shows the longest partial linearizations found).
		_, info := porcupine.CheckOperationsVerbose(illegalModel, illegal, min(timeout, visualizeTimeout))
		_ = porcupine.VisualizePath(illegalModel, info, opts.VisualizePath)
	}
	res.Elapsed = time.Since(start)
	return res
}
