//go:build kahuna_unsafe

package kahuna

import (
	"os"
	"strings"
)

// A program built with -tags kahuna_unsafe whose KAHUNA_UNSAFE lists
// no-deadline runs every Lock without its deadline: it is lost only when
// an answer says the lease is gone (a leader paused past its lease acts
// when it wakes). The process-level election test's negative control.
// A release build has no such switch.
func init() {
	unsafeNoDeadline = strings.Contains(","+os.Getenv("KAHUNA_UNSAFE")+",", ",no-deadline,")
}
