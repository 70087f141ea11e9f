package lease

import (
	"strconv"
	"strings"
	"time"
)

// An election is the lock ElectionPrefix + its name, held by an owner that
// is a candidate ID of CandidateIDBytes followed by the candidate's value.
const (
	ElectionPrefix   = "election:"
	CandidateIDBytes = 32
	// MaxElectionValue is the longest value: what an owner can carry
	// after the candidate ID.
	MaxElectionValue = MaxOwnerBytes - CandidateIDBytes
)

// CheckElection says why an election's name or a candidate's value is
// not well formed, or "".
func CheckElection(name string, value []byte) string {
	switch {
	case name == "":
		return "election name is empty"
	case len(ElectionPrefix)+len(name) > MaxResourceBytes:
		return "election name is " + strconv.Itoa(len(name)) + " bytes, over the limit of " +
			strconv.Itoa(MaxResourceBytes-len(ElectionPrefix))
	case len(value) > MaxElectionValue:
		return overSize("value", len(value), MaxElectionValue)
	}
	return ""
}

// IsElection reports whether resource is an election's lock.
func IsElection(resource string) bool { return strings.HasPrefix(resource, ElectionPrefix) }

// checkProclaim says why r's NewOwner is not well formed, or "": a
// proclaim is an Extend of an election's lock whose NewOwner keeps the
// holder's candidate ID (the owner's first CandidateIDBytes).
func (r *Request) checkProclaim() string {
	switch {
	case r.NewOwner == nil:
		return ""
	case r.Op != Extend:
		return "a new owner is only for an extend (a proclaim), not " + r.Op.String()
	case !IsElection(r.Resource):
		return "a new owner (a proclaim) is only for an election's lock, whose name starts with " + ElectionPrefix
	case len(r.NewOwner) > MaxOwnerBytes:
		return overSize("new owner", len(r.NewOwner), MaxOwnerBytes)
	case len(r.Owner) < CandidateIDBytes || len(r.NewOwner) < CandidateIDBytes:
		return "a proclaim's owners start with a candidate ID of " + strconv.Itoa(CandidateIDBytes) + " bytes"
	case string(r.Owner[:CandidateIDBytes]) != string(r.NewOwner[:CandidateIDBytes]):
		return "a proclaim keeps the candidate ID: the new owner's first " + strconv.Itoa(CandidateIDBytes) + " bytes differ from the owner's"
	}
	return ""
}

// decideProclaim decides a proclaim: an Extend that, when the live holder
// is r.Owner, also makes r.NewOwner the holder, with the same token. It
// is a compare-and-swap, so a proclaim that arrives late (sent before a
// later one, or retried) finds another owner and changes nothing; one
// that finds NewOwner already holding is its own retry, and extends.
func decideProclaim(e Entry, r *Request, now time.Time) Decision {
	if !e.Live(now) {
		return Decision{Status: LockDoesNotExist}
	}
	if string(e.Owner) != string(r.Owner) && string(e.Owner) != string(r.NewOwner) {
		return Decision{Status: InvalidOwner}
	}
	next := e
	next.Owner = r.NewOwner
	next.Expires = now.Add(r.TTL)
	next.Revision++
	return Decision{Status: Extended, Token: e.Token, Write: true, Next: next}
}
