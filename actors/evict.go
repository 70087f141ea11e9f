package actors

// collect evicts idle entries (DESIGN §3). It runs every collectEvery
// messages and only when the actor caches collectMinEntries or more. An
// entry qualifies when unused for CacheEntryTTL; at most
// CacheEntriesToRemove go per pass. Unlike Kahuna it never evicts an entry
// with a write in flight (its completion needs it) nor an ephemeral lock
// whose lease is live (that would free a held lock). An evicted persistent
// entry is reloaded from the store on next use.
func (a *lockActor) collect() {
	if len(a.ephemeral)+len(a.durable) < collectMinEntries {
		return
	}
	now := a.cfg.Now()
	budget := a.cfg.CacheEntriesToRemove
	evict := func(t map[string]*slot, keepLive bool) {
		for k, s := range t {
			if budget <= 0 {
				return
			}
			if s.inflight != nil || now.Sub(s.lastUsed) < a.cfg.CacheEntryTTL {
				continue
			}
			if keepLive && s.Live(now) {
				continue
			}
			delete(t, k)
			budget--
			a.evictions.Add(1)
		}
	}
	evict(a.ephemeral, true)
	evict(a.durable, false)
}
