package bench

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/kahunago/kahuna/lease"
)

// A Target is a lock service the harness can drive. Targets are plain
// values so another module (the peers' command) can add its own to the
// registry it passes to Main.
type Target struct {
	// Name is how --target and --compare name it.
	Name string
	// Aliases are other accepted names ("kahuna-embedded" for "embedded").
	Aliases []string
	// About is one line for -help.
	About string
	// InProcess targets run inside the harness's process, so the
	// allocations made during a run are theirs (and the harness's, which
	// are accounted for): allocs/op is reported for them only.
	InProcess bool
	// NeedsEndpoints targets refuse to run without --endpoints.
	NeedsEndpoints bool
	// Open starts or connects to the service for one run.
	Open func(ctx context.Context, s Settings) (System, error)
}

// Settings is what a Target is told when it opens: the run's shape and the
// connection flags. Workload details beyond this are not a target's concern.
type Settings struct {
	Endpoints   []string
	DataDir     string // embedded: "" = in memory (ephemeral) or a temp dir (persistent)
	Durability  lease.Durability
	TTL         time.Duration
	Concurrency int
	Partitions  int // embedded: 0 = kahuna's default
	LockActors  int // embedded: 0 = kahuna's default
	Streams     int // grpc, native: batch streams to each endpoint; 0 = kahuna.Client's default
	Insecure    bool
	Logger      *slog.Logger
	// CountRequests asks a target that can count the lock requests its
	// service receives to do so and be a RequestCounter (hot-wait).
	CountRequests bool
}

// A System is an opened target.
type System interface {
	// Locker returns the Locker worker i (0 ≤ i < Concurrency) uses. Most
	// systems hand every worker the same one; a system whose clients hold
	// per-caller state (an etcd session) makes one per worker.
	Locker(ctx context.Context, worker int) (lease.Locker, error)
	// Close releases what Open started (connections, servers, temp dirs).
	Close() error
}

// Registry is the set of targets a program offers.
type Registry []Target

// Lookup finds a target by name or alias.
func (r Registry) Lookup(name string) (Target, bool) {
	for _, t := range r {
		if t.Name == name || slices.Contains(t.Aliases, name) {
			return t, true
		}
	}
	return Target{}, false
}

// resolve reads a target spec, NAME or NAME:DURABILITY (embedded:persistent),
// as --target and --compare take it: the target (named NAME, or
// NAME:durability with the suffix in its canonical spelling) and the
// durability its run uses (def without a suffix). ok is false for an
// unknown NAME; err is set for a bad suffix.
func (r Registry) resolve(spec string, def lease.Durability) (t Target, d lease.Durability, ok bool, err error) {
	name, suffix, hasSuffix := strings.Cut(spec, ":")
	d = def
	if hasSuffix {
		if d, err = parseDurability(suffix); err != nil {
			return Target{}, def, false, fmt.Errorf("target %q: %w", spec, err)
		}
	}
	if t, ok = r.Lookup(name); !ok {
		return Target{}, def, false, nil
	}
	if hasSuffix {
		t.Name += ":" + strings.ToLower(d.String())
	}
	return t, d, true, nil
}

// names lists the primary names, for error messages and -help.
func (r Registry) names() string {
	names := make([]string, len(r))
	for i, t := range r {
		names[i] = t.Name
	}
	return strings.Join(names, ", ")
}

// usage describes every target, one per line.
func (r Registry) usage() string {
	var b strings.Builder
	for _, t := range r {
		name := t.Name
		if len(t.Aliases) > 0 {
			name += " (" + strings.Join(t.Aliases, ", ") + ")"
		}
		fmt.Fprintf(&b, "  %-28s %s\n", name, t.About)
	}
	return b.String()
}

// DefaultTargets are the targets of the core module: kahuna itself, in
// process and over the wire, and the mutex baseline.
func DefaultTargets() Registry {
	return Registry{EmbeddedTarget(), MutexTarget(), GRPCTarget(), NativeTarget(), RESTTarget()}
}

// Shared is a System whose one Locker serves every worker.
type Shared struct {
	L       lease.Locker
	CloseFn func() error // nil: nothing to close
}

// Locker implements System.
func (s Shared) Locker(context.Context, int) (lease.Locker, error) { return s.L, nil }

// Close implements System.
func (s Shared) Close() error {
	if s.CloseFn == nil {
		return nil
	}
	return s.CloseFn()
}
