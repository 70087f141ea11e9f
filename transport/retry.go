package transport

import (
	"math/rand/v2"
	"time"
)

// MustRetry backoff bounds: the first wait is about minBackoff (a node
// that answers MustRetry is usually between leaders for milliseconds) and
// waits double up to maxBackoff.
const (
	minBackoff = time.Millisecond
	maxBackoff = 50 * time.Millisecond
)

// backoff yields the waits between MustRetry attempts: a ceiling that
// doubles from minBackoff to maxBackoff, each wait drawn uniformly from its
// upper half, so retrying clients spread out instead of retrying in step.
type backoff struct{ ceiling time.Duration }

func (b *backoff) next() time.Duration {
	if b.ceiling == 0 {
		b.ceiling = minBackoff
	} else {
		b.ceiling = min(2*b.ceiling, maxBackoff)
	}
	half := b.ceiling / 2
	return half + rand.N(half+1)
}
