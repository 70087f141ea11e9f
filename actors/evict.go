package actors

import (
	"time"

	"github.com/kahunago/kahuna/lease"
)

// collect evicts idle entries (docs/design.md, Cache eviction). It runs every collectEvery
// messages and only when the actor caches collectMinEntries or more. An
// entry qualifies when unused for CacheEntryTTL; at most
// CacheEntriesToRemove go per pass. Unlike Kahuna it never evicts an entry
// with a write in flight (its completion needs it), nor one with waiters or watchers,
// nor a live lease: an
// ephemeral one would be freed, and a persistent one would come back from
// its recorded wall-clock expiry, so a wall-clock jump since the grant
// would move it (a lease is measured on the monotonic clock where it was
// granted). An evicted entry is reloaded from the store on next use (an
// ephemeral grant's token count then falls back to the stored record's, or
// restarts at 0 without one: see the token rule in the package doc).
//
// A full scan records the oldest lastUsed it kept; lastUsed only moves
// forward and new entries start at "now", so until that bound is
// CacheEntryTTL old no entry can qualify and the scan is skipped.
func (a *lockActor) collect() {
	now := a.cfg.Now()
	a.forgetKept(-1, now)
	if len(a.entries) < collectMinEntries {
		return
	}
	if now.Sub(a.oldestUse) < a.cfg.CacheEntryTTL {
		return // nothing can be idle long enough yet: skip the scan
	}
	budget := a.cfg.CacheEntriesToRemove
	oldest := now
	for name, s := range a.entries {
		if budget <= 0 {
			oldest = time.Time{} // scan cut short: the bound is unknown
			break
		}
		if used := a.epoch.Add(s.lastUsed); s.busy() || now.Sub(used) < a.cfg.CacheEntryTTL || s.Live(now) {
			if used.Before(oldest) {
				oldest = used
			}
			continue
		}
		a.uncache(name, s)
		budget--
		a.evictions.Add(1)
	}
	a.oldestUse = oldest
}

// pressureScan bounds the entries one makeRoom pass looks at, so a full
// actor whose entries are all in use costs each refused request a bounded
// scan, not one of the whole map. Go's map iteration starts at a random
// place, so successive passes look at different entries.
const pressureScan = 256

// full reports whether the actor caches MaxEntries entries (0: no cap).
func (a *lockActor) full() bool {
	return a.cfg.MaxEntries > 0 && len(a.entries) >= a.cfg.MaxEntries
}

// room reports whether a new entry may be cached, evicting lapsed entries
// first when the actor is full (makeRoom).
func (a *lockActor) room(now time.Time) bool {
	if !a.full() {
		return true
	}
	a.makeRoom(now)
	return !a.full()
}

// makeRoom evicts up to CacheEntriesToRemove (at least one) entries that
// can go, among at most pressureScan entries: as collect, never one with a
// write in flight, waiters, watchers or a live lease, but without waiting
// for CacheEntryTTL of idleness: at the cap the choice is between
// forgetting a lapsed entry, which the next miss reloads from the store
// (see the token rule in the package doc), and refusing a request.
func (a *lockActor) makeRoom(now time.Time) {
	budget := max(a.cfg.CacheEntriesToRemove, 1)
	looked := 0
	for name, s := range a.entries {
		if budget <= 0 || looked >= pressureScan {
			return
		}
		looked++
		if s.busy() || s.Live(now) {
			continue
		}
		a.uncache(name, s)
		budget--
		a.evictions.Add(1)
	}
}

// busy reports whether s holds what eviction must never lose: a write in
// flight (its completion needs the entry), waiters or watchers.
func (s *slot) busy() bool {
	return s.x != nil && (s.x.inflight != nil || len(s.x.waiters) > 0 || len(s.x.watchers) > 0)
}

// forgetIfBlank drops s if it holds nothing a miss would not load again:
// no lock ever granted on it here nor stored, and nothing waiting on it
// (a watch of a name never locked, ended).
func (a *lockActor) forgetIfBlank(name string, s *slot) {
	if s.State == lease.Absent && s.index() == 0 && !s.busy() && a.entries[name] == s {
		delete(a.entries, name)
	}
}
