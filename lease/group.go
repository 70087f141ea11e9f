package lease

import (
	"strconv"
	"strings"
)

// A lock of several names at once is a TryLock whose Also names more
// resources than Resource, all of Resource's partition key (the part
// before the last '/': so one partition holds them all, whatever the
// cluster's partitioning). Every name is granted to Owner for TTL with a
// fencing token of its own, or none is, in one replicated step: the
// records of all the grants are one Raft entry that applies all or
// nothing. It is persistent, and does not wait on the server.

// MaxGroupNames is the most names one lock of several names takes, and
// MaxGroupBytes the most bytes its names take together: the request stays
// well under the servers' message limit (64 KiB by default).
const (
	MaxGroupNames = 64
	MaxGroupBytes = 16 << 10
)

// BusyName is the Reason of a Busy answer to a lock of several names:
// which name (its place in Names, from 1) is held. BusyNameOf reads it
// back.
func BusyName(place int) string {
	return "name " + strconv.Itoa(place) + " is held by another owner"
}

// BusyNameOf is the place BusyName wrote in reason, or 0.
func BusyNameOf(reason string) int {
	rest, ok := strings.CutPrefix(reason, "name ")
	if !ok {
		return 0
	}
	digits, ok := strings.CutSuffix(rest, " is held by another owner")
	if !ok {
		return 0
	}
	place, err := strconv.Atoi(digits)
	if err != nil || place < 1 {
		return 0
	}
	return place
}

// Names is r's resources: Resource, then Also.
func (r *Request) Names() []string {
	return append([]string{r.Resource}, r.Also...)
}

// checkGroup says why r's Also is not well formed, or "". A reason names
// a resource by its place in Names, never by its name.
func (r *Request) checkGroup() string {
	if r.Also == nil {
		return ""
	}
	if r.Op == Extend || r.Op == Unlock {
		return r.checkBatch()
	}
	switch {
	case r.Op != TryLock:
		return "several names are for a lock, an extend or an unlock, not " + r.Op.String()
	case r.Durability != Persistent:
		return "a lock of several names at once is persistent: its one step is a replicated record group"
	case r.Wait != 0:
		return "a lock of several names at once does not wait on the server"
	case r.Permits != 0 || r.Limit != 0 || r.Shared || r.Resize || r.NewOwner != nil:
		return "a lock of several names at once takes plain locks: no permits, limit, shared, resize or new owner"
	}
	if reason := r.checkNames(); reason != "" {
		return reason
	}
	key := PartitionKey(r.Resource)
	for i, name := range r.Also {
		if PartitionKey(name) != key {
			return "name " + strconv.Itoa(i+2) + " has another partition key (the part before the last '/') than name 1: " +
				"only names of one partition key are granted in one step"
		}
	}
	return ""
}

// checkNames says why r's names do not make one request of several names
// (a lock of several names, or a batch), or "": too few or too many, too
// many bytes together, a name not well formed for r.Op, a name twice, or
// one that is not a plain lock's. A reason names a resource by its place
// in Names, never by its name.
func (r *Request) checkNames() string {
	switch {
	case len(r.Also) == 0:
		return "also is empty: give more names, or none"
	case len(r.Also)+1 > MaxGroupNames:
		return strconv.Itoa(len(r.Also)+1) + " names, over the limit of " + strconv.Itoa(MaxGroupNames)
	}
	size := len(r.Resource)
	for _, name := range r.Also {
		size += len(name)
	}
	if size > MaxGroupBytes {
		return "the names take " + strconv.Itoa(size) + " bytes together, over the limit of " + strconv.Itoa(MaxGroupBytes)
	}
	seen := make(map[string]int, len(r.Also)+1)
	for i, name := range r.Names() {
		place := "name " + strconv.Itoa(i+1)
		if i > 0 {
			if reason := Check(r.Op, name, r.Owner, r.TTL, r.Durability); reason != "" {
				return place + ": " + reason
			}
		}
		if j, dup := seen[name]; dup {
			return place + " is name " + strconv.Itoa(j+1) + " again"
		}
		seen[name] = i
		if !IsPlain(name) {
			return place + " is a semaphore, a read/write lock or an election: a request of several names takes plain locks"
		}
	}
	return ""
}
