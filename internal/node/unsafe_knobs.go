//go:build kahuna_unsafe

package node

import (
	"fmt"
	"log/slog"
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

func unsafeFromEnv(k *TestingKnobs, logger *slog.Logger) error {
	v := os.Getenv("KAHUNA_UNSAFE")
	if v == "" {
		return nil
	}
	for _, sw := range strings.Split(v, ",") {
		switch strings.TrimSpace(sw) {
		case "no-lease":
			k.UnsafeNoLeaseCheck = true
		case "no-fence":
			k.UnsafeNoFence = true
		case "applied-first":
			k.UnsafeAppliedFirst = true
		case "tokens-from-zero":
			k.UnsafeTokensFromZero = true
		case "no-evict-floor":
			k.UnsafeNoEvictFloor = true
		default:
			return fmt.Errorf("kahuna: KAHUNA_UNSAFE: unknown switch %q (no-lease, no-fence, applied-first, tokens-from-zero, no-evict-floor)", sw)
		}
	}
	logger.Warn("SAFETY PROTECTIONS SWITCHED OFF (a negative-control build)", "KAHUNA_UNSAFE", v)
	return nil
}
