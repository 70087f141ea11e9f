//go:build kahuna_unsafe

package kahuna

import (
	"fmt"
	"os"
	"strings"
)

// A binary built with -tags kahuna_unsafe reads KAHUNA_UNSAFE, a
// comma-separated list of protections to switch off, so that the
// process-level fault tests (e2e) can show they catch the broken variant:
//
//	no-lease   answer on the Raft leader flag alone, without the leader lease
//	no-fence   apply records without the state machine's compare-and-set and epoch
//	applied-first  store the applied index ahead of the records it covers (a crash loses some)
//	tokens-from-zero  a new leader counts ephemeral tokens from the stored record (they go backwards)
//	no-evict-floor    an evicted ephemeral entry's token is forgotten (the next grant may repeat it)
//
// The build tag is the only way in: a release build has no such switch.
func init() { unsafeKnobs = unsafeFromEnv }

func unsafeFromEnv(cfg *Config) error {
	v := os.Getenv("KAHUNA_UNSAFE")
	if v == "" {
		return nil
	}
	for _, k := range strings.Split(v, ",") {
		switch strings.TrimSpace(k) {
		case "no-lease":
			cfg.unsafeNoLeaseCheck = true
		case "no-fence":
			cfg.unsafeNoFence = true
		case "applied-first":
			cfg.unsafeAppliedFirst = true
		case "tokens-from-zero":
			cfg.unsafeTokensFromZero = true
		case "no-evict-floor":
			cfg.unsafeNoEvictFloor = true
		default:
			return fmt.Errorf("kahuna: KAHUNA_UNSAFE: unknown switch %q (no-lease, no-fence, applied-first, tokens-from-zero, no-evict-floor)", k)
		}
	}
	cfg.Logger.Warn("SAFETY PROTECTIONS SWITCHED OFF (a negative-control build)", "KAHUNA_UNSAFE", v)
	return nil
}
