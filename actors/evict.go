package actors

import "time"

// collect evicts idle entries (DESIGN §3). It runs every collectEvery
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
	if len(a.entries) < collectMinEntries {
		return
	}
	now := a.cfg.Now()
	if now.Sub(a.oldestUse) < a.cfg.CacheEntryTTL {
		return // nothing can be idle long enough yet: skip the scan
	}
	budget := a.cfg.CacheEntriesToRemove
	oldest := now
	for k, s := range a.entries {
		if budget <= 0 {
			oldest = time.Time{} // scan cut short: the bound is unknown
			break
		}
		if s.inflight != nil || len(s.waiters) > 0 || len(s.watchers) > 0 || now.Sub(s.lastUsed) < a.cfg.CacheEntryTTL || s.Live(now) {
			if s.lastUsed.Before(oldest) {
				oldest = s.lastUsed
			}
			continue
		}
		delete(a.entries, k)
		budget--
		a.evictions.Add(1)
	}
	a.oldestUse = oldest
}
