package lease

// A batch is an Extend or an Unlock whose Also names more resources than
// Resource: the same call, by the same Owner (with the same TTL, for an
// Extend), made for every name in one request. Each name is extended or
// released on its own, as if asked alone, and answered on its own in
// Result.Each; the names may be of any partitions. It is what keeps a
// session's locks alive in one request per renewal, and releases them in
// one request when it closes: the server sends each partition's share to
// its leader as one call, and the leader's writes of it share Raft
// entries.
//
// A batch takes plain locks only: a semaphore's or a read/write lock's
// holders and an election's candidates are extended and released on
// their own.

// checkBatch says why r, an Extend or Unlock with Also, is not a well
// formed batch, or "". A reason names a resource by its place in Names.
func (r *Request) checkBatch() string {
	if r.Permits != 0 || r.Limit != 0 || r.Shared || r.Resize || r.NewOwner != nil {
		return "a batch of several names takes plain locks: no permits, limit, shared, resize or new owner"
	}
	return r.checkNames()
}

// IsBatch reports whether r is a batch: an Extend or Unlock with Also.
func (r *Request) IsBatch() bool {
	return r.Also != nil && (r.Op == Extend || r.Op == Unlock)
}

// BatchStatus is a batch's status from each name's: Extended (Unlocked,
// for an Unlock) when every name's is, else the first other one.
func BatchStatus(op Op, each []Status) Status {
	done := Extended
	if op == Unlock {
		done = Unlocked
	}
	for _, s := range each {
		if s != done {
			return s
		}
	}
	return done
}

// IsPlain reports whether name is a plain lock's: not a semaphore's, a
// read/write lock's or an election's.
func IsPlain(name string) bool {
	return !IsSemaphore(name) && !IsRWLock(name) && !IsElection(name)
}
