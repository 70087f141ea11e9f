package lease

import (
	"bytes"
	"cmp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Listing live locks by name prefix, a page at a time (the embedded
// node's and the client's List, the REST route GET /v1/locks).
const (
	// DefaultListLimit is the page size of a list that names none.
	DefaultListLimit = 100
	// MaxListLimit is the largest page: each partition's leader reads at
	// most one more than this many locks for one page.
	MaxListLimit = 1000
)

// ListRequest asks for the live locks whose name starts with Prefix ("":
// every name), in name order, after the name After ("": from the first),
// at most Limit of them (0: DefaultListLimit).
type ListRequest struct {
	Prefix string
	After  string
	Limit  int
}

// Check says why r is not a valid list request ("" if it is): a limit
// that is negative or over MaxListLimit, or a prefix or cursor longer
// than a resource name may be. Such a request is InvalidInput and reads
// nothing.
func (r ListRequest) Check() string {
	switch {
	case r.Limit < 0:
		return "limit " + strconv.Itoa(r.Limit) + " is negative"
	case r.Limit > MaxListLimit:
		return "limit " + strconv.Itoa(r.Limit) + " is over the limit of " + strconv.Itoa(MaxListLimit)
	case len(r.Prefix) > MaxResourceBytes:
		return overSize("prefix", len(r.Prefix), MaxResourceBytes)
	case len(r.After) > MaxResourceBytes:
		return overSize("after", len(r.After), MaxResourceBytes)
	}
	return ""
}

// PageSize is the number of locks r asks for: Limit, or DefaultListLimit
// when it is 0.
func (r ListRequest) PageSize() int {
	if r.Limit == 0 {
		return DefaultListLimit
	}
	return r.Limit
}

// Wants reports whether resource belongs in r's listing: it starts with
// Prefix and comes after After.
func (r ListRequest) Wants(resource string) bool {
	return strings.HasPrefix(resource, r.Prefix) && resource > r.After
}

// ListedLock is one live lock of a listing.
type ListedLock struct {
	Resource     string
	Owner        []byte
	Expires      time.Time // wall clock, millisecond precision over a wire
	FencingToken int64
	Durability   Durability
	// Holders, for a semaphore or a read/write lock (whose Owner is
	// empty), are its live holders: each permit, or each reader or the
	// writer. Expires and FencingToken are then the latest and highest.
	Holders []Holder
}

// Holder is one live holder of a semaphore (its slot) or of a read/write
// lock.
type Holder struct {
	Slot         int // a semaphore's slot; 0 for a read/write lock
	Owner        []byte
	Expires      time.Time
	FencingToken int64
}

// HoldersOf lists e's live holders at now, if e has several (IsShared),
// their owners copied; expiries as wall-clock readings.
func HoldersOf(e *Entry, now time.Time) []Holder {
	var out []Holder
	for i := range e.Slots {
		if s := &e.Slots[i]; s.live(now) {
			h := Holder{Owner: bytes.Clone(s.Owner), Expires: s.Expires.Round(0), FencingToken: s.Token}
			if e.IsSemaphore() {
				h.Slot = i
			}
			out = append(out, h)
		}
	}
	return out
}

// LockPage is one page of a listing, in name order. Next, when not "",
// is the name to pass as the next request's After: there may be more
// locks after it. "" means the listing is complete.
type LockPage struct {
	Locks []ListedLock
	Next  string
}

// MergePages merges pages of disjoint or overlapping listings (of
// partitions, or of a partition's memory and store) into one page of at
// most limit locks in name order. A name found in several pages is kept
// from the first page that has it. Each page must hold every lock of its
// source up to its last one: either its whole listing (Next "") or a full
// page of limit locks with Next set.
func MergePages(limit int, pages ...LockPage) LockPage {
	var all []ListedLock
	more := false
	seen := make(map[string]bool)
	for _, p := range pages {
		more = more || p.Next != ""
		for _, l := range p.Locks {
			if !seen[l.Resource] {
				seen[l.Resource] = true
				all = append(all, l)
			}
		}
	}
	slices.SortFunc(all, func(a, b ListedLock) int { return cmp.Compare(a.Resource, b.Resource) })
	out := LockPage{Locks: all}
	if len(all) > limit {
		out.Locks, more = all[:limit], true
	}
	if more && len(out.Locks) > 0 {
		out.Next = out.Locks[len(out.Locks)-1].Resource
	}
	return out
}

// ListError refuses a list: InvalidInput (Reason says why; nothing was
// read) or MustRetry (some partitions had no leader that answered, being
// elected or moving; Reason names them: list again).
type ListError struct {
	Status Status
	Reason string
}

func (e *ListError) Error() string { return "list: " + e.Status.Describe() + ": " + e.Reason }
