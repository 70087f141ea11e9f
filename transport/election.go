package transport

import (
	"bytes"
	"strconv"

	"github.com/kahunago/kahuna/lease"
)

// An election's leadership, as its lock's watch events tell it: the
// vocabulary of the Go API's Observe and of the Election service's.

// ElectionEventKind says what an ElectionEvent reports.
type ElectionEventKind uint8

const (
	// Elected: a leader was elected, with Value and Epoch.
	Elected ElectionEventKind = iota + 1
	// Vacant: no leader. Epoch is the last term's (-1: never had one).
	Vacant
	// Proclaimed: the leader of the term Epoch set a new Value.
	Proclaimed
)

func (k ElectionEventKind) String() string {
	switch k {
	case Elected:
		return "elected"
	case Vacant:
		return "vacant"
	case Proclaimed:
		return "proclaimed"
	}
	return "ElectionEventKind(" + strconv.Itoa(int(k)) + ")"
}

// ElectionEvent is one change of an election's leadership.
type ElectionEvent struct {
	Kind  ElectionEventKind
	Value []byte
	Epoch int64
	// Revision is the election lock's revision at this event: observe
	// again from it to resume after it.
	Revision uint64
}

// ElectionFold turns the watch events of an election's lock, in order,
// into the election's changes: a renewal, or the same state seen again
// (after a new subscription), is not one. Its zero value is ready.
type ElectionFold struct {
	last *ElectionEvent
}

// Next is the change ev makes, and whether it is one.
func (f *ElectionFold) Next(ev WatchEvent) (ElectionEvent, bool) {
	e := electionEventOf(ev)
	if last := f.last; last != nil && last.Epoch == e.Epoch && (last.Kind == Vacant) == (e.Kind == Vacant) {
		if e.Kind == Vacant || bytes.Equal(last.Value, e.Value) {
			last.Revision = e.Revision
			return ElectionEvent{}, false
		}
		e.Kind = Proclaimed // the same term with another value
	}
	f.last = &e
	return e, true
}

// electionEventOf is what a watch event of an election's lock says of the
// election.
func electionEventOf(ev WatchEvent) ElectionEvent {
	switch ev.Kind {
	case EventAcquired, EventExtended:
		return ElectionEvent{Kind: Elected, Value: ElectionValue(ev.Owner), Epoch: ev.FencingToken, Revision: ev.Revision}
	}
	e := ElectionEvent{Kind: Vacant, Epoch: ev.FencingToken, Revision: ev.Revision}
	if ev.Revision == 0 {
		e.Epoch = -1 // never locked
	}
	return e
}

// ElectionValue is the value in an election lock's owner: what follows
// the candidate ID.
func ElectionValue(owner []byte) []byte {
	if len(owner) < lease.CandidateIDBytes {
		return nil
	}
	return append([]byte(nil), owner[lease.CandidateIDBytes:]...)
}
