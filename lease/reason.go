package lease

import (
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Check says why a request is not well formed (Valid): a short, lower-case
// reason naming the field and the limit, such as "ttl 1000h0m0s is over
// the limit of 596h31m23.647s" or "resource is 2000 bytes, over the limit
// of 1024". It is "" for a valid request. A reason never quotes the
// resource or the owner, only their sizes, so it is safe to show and log
// whatever the input. It allocates only for an invalid request.
func Check(op Op, resource string, owner []byte, ttl time.Duration, d Durability) (reason string) {
	if op > Get {
		return "op " + op.String() + " is unknown"
	}
	switch {
	case resource == "":
		return "resource is empty"
	case len(resource) > MaxResourceBytes:
		return overSize("resource", len(resource), MaxResourceBytes)
	case !d.Valid():
		return "durability " + strconv.FormatInt(int64(d), 10) + " is unknown (0 ephemeral, 1 persistent)"
	}
	if op == Get {
		return ""
	}
	switch {
	case len(owner) == 0:
		return "owner is empty"
	case len(owner) > MaxOwnerBytes:
		return overSize("owner", len(owner), MaxOwnerBytes)
	}
	if op == Unlock {
		return ""
	}
	switch {
	case ttl <= 0:
		return "ttl " + ttl.String() + " is not positive"
	case ttl > MaxTTL:
		return "ttl " + ttl.String() + " is over the limit of " + MaxTTL.String()
	}
	return ""
}

// CheckWait says why wait is not a valid wait for a waiting lock request
// (ValidWait), or "" if it is.
func CheckWait(wait time.Duration) (reason string) {
	switch {
	case wait == WaitForever || (wait >= 0 && wait <= MaxWait):
		return ""
	case wait < 0:
		return "wait " + wait.String() + " is negative (only WaitForever, -1ns, waits without a limit)"
	}
	return "wait " + wait.String() + " is over the limit of " + MaxWait.String()
}

func overSize(field string, n, limit int) string {
	return field + " is " + strconv.Itoa(n) + " bytes, over the limit of " + strconv.Itoa(limit)
}

// MaxExcerptBytes is how much of a name Excerpt keeps.
const MaxExcerptBytes = 64

// Excerpt is s cut to show in a message: s itself if it is at most
// MaxExcerptBytes long, else its first MaxExcerptBytes bytes (cut back to
// a whole UTF-8 character) followed by "…" and its length, so an
// over-long resource is not echoed in full into errors and logs. Bytes
// that are not UTF-8 are shown as U+FFFD.
func Excerpt(s string) string {
	if len(s) > MaxExcerptBytes {
		cut := MaxExcerptBytes
		for cut > MaxExcerptBytes-utf8.UTFMax && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…(" + strconv.Itoa(len(s)) + " bytes)"
	}
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	return s
}

// Describe says in a few lower-case words what a status means to the
// caller, for messages: "busy (held by another owner)", "no such lock
// (never locked, released or expired)", "outcome unknown (...)". It does
// not know why a request was InvalidInput: that is Result.Reason.
func (s Status) Describe() string {
	switch s {
	case Locked:
		return "locked"
	case Busy:
		return "busy (held by another owner)"
	case Extended:
		return "extended"
	case Unlocked:
		return "unlocked"
	case Got:
		return "got"
	case InvalidInput:
		return "invalid input"
	case InvalidOwner:
		return "held by another owner"
	case LockDoesNotExist:
		return "no such lock (never locked, released or expired)"
	case MustRetry:
		return "must retry (the node cannot serve it now; nothing was applied)"
	case Errored:
		return "outcome unknown (the request may or may not have been applied)"
	case WaitingForReplication:
		return "outcome unknown (waiting for replication)"
	case Aborted:
		return "outcome unknown (aborted)"
	}
	return s.String()
}
