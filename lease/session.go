package lease

import "strconv"

// A session is the lock SessionPrefix + its ID, held by the ID: 32
// lowercase hex characters (CandidateIDBytes), so the ID is also the
// candidate ID at the head of its election candidacies' owners. Its locks
// are held by the ID.
const SessionPrefix = "session:"

// CheckSessionID says why id cannot be a session's ID, or "".
func CheckSessionID(id string) string {
	if id == "" {
		return "session ID is empty"
	}
	if len(id) != CandidateIDBytes {
		return "session ID is " + strconv.Itoa(len(id)) + " bytes, not " + strconv.Itoa(CandidateIDBytes)
	}
	for _, c := range []byte(id) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return "session ID is not lowercase hex"
		}
	}
	return ""
}
