package lease

import "strconv"

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
