package bench

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kahunago/kahuna/lease"
)

// Config is one invocation: the targets and the workload they all get.
type Config struct {
	Targets     []string // one (--target) or several (--compare), canonical names
	Workload    string
	Mix         []MixPart // mixed workload
	Extends     int       // extend workload: extensions per hold
	KeySpace    int       // 0 = the workload's default
	KeyPrefix   string
	TTL         time.Duration
	Durability  lease.Durability
	Concurrency int
	Rate        float64 // operations per second over all workers; 0 = closed loop
	Duration    time.Duration
	Warmup      time.Duration
	Timeout     time.Duration // per operation; 0 = none
	// Rounds runs the targets this many times, alternating their order.
	Rounds int
	Hold   time.Duration // hot-wait: how long each grant is held before its Unlock
	Wait   time.Duration // hot-wait: the longest wait of one acquire
	// Kind is what hot-wait contends for: a mutex (KindMutex), one permit
	// of a semaphore of Limit permits, or a read/write lock's read lock
	// (a fraction Reads of the acquires) or write lock.
	Kind  string
	Limit int
	Reads float64
	Seed  uint64 // 0 = pick one (and report it)

	Format     string // console, json or csv
	Output     string // "" = stdout
	Plot       string // "" = none; .png or .svg
	CPUProfile string
	Progress   bool // the live line on stderr
	// Procs, above 0, is GOMAXPROCS for the run's process and the servers
	// it starts; 0 leaves Go's default (or $GOMAXPROCS).
	Procs int
	// ClientProcs, above 0, is GOMAXPROCS for the run's process alone: the
	// servers it starts run at Go's default, as their operators run them.
	ClientProcs int
	LogLevel    slog.Level

	Endpoints  []string
	DataDir    string
	Partitions int
	LockActors int
	// Streams, above 0, is the batch streams the grpc and native targets'
	// client opens to each endpoint; 0 leaves kahuna.Client's default.
	Streams  int
	Insecure bool
}

// MixPart is one weighted operation of the mixed workload.
type MixPart struct {
	Op     string
	Weight int
}

// Defaults, chosen to match Kahuna's kahuna-bench where it has one.
const (
	DefaultConcurrency = 64
	DefaultKeySpace    = 10_000
	DefaultHotKeys     = 1
	DefaultKeyPrefix   = "bench:" // no '/': keys spread over every partition
	DefaultTTL         = 5 * time.Second
	DefaultDuration    = 10 * time.Second
	DefaultWarmup      = 2 * time.Second
	DefaultTimeout     = 10 * time.Second
	DefaultExtends     = 3
	DefaultMix         = "lock=50,get=50"
	DefaultWait        = 5 * time.Second
	DefaultLimit       = 8
	DefaultReads       = 0.9
)

// Lock kinds of the hot-wait workload, as --kind takes them.
const (
	KindMutex     = "mutex"
	KindSemaphore = "semaphore"
	KindRWLock    = "rwlock"
)

var kinds = []string{KindMutex, KindSemaphore, KindRWLock}

// keyPrefix is the prefix of every key: a semaphore's or read/write
// lock's entry prefix before --key-prefix for those kinds.
func (c *Config) keyPrefix() string {
	switch c.Kind { // "" is a mutex, as in a Config built without validate
	case KindSemaphore:
		return lease.SemaphorePrefix + c.KeyPrefix
	case KindRWLock:
		return lease.RWLockPrefix + c.KeyPrefix
	}
	return c.KeyPrefix
}

var formats = []string{"console", "json", "csv"}

// keys is the effective key space.
func (c *Config) keys() int {
	switch {
	case c.KeySpace > 0:
		return c.KeySpace
	case c.Workload == WorkloadHot, c.Workload == WorkloadHotWait:
		return DefaultHotKeys
	}
	return DefaultKeySpace
}

// validate reports every bad setting at once. reg resolves target names.
func (c *Config) validate(reg Registry) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if len(c.Targets) == 0 {
		bad("no target: give --target or --compare")
	}
	if c.Rounds < 1 {
		bad("--rounds must be ≥ 1, got %d", c.Rounds)
	}
	if c.Procs < 0 {
		bad("--procs must be ≥ 0 (0 = Go's default), got %d", c.Procs)
	}
	if c.ClientProcs < 0 {
		bad("--client-procs must be ≥ 0 (0 = Go's default), got %d", c.ClientProcs)
	}
	if c.Procs > 0 && c.ClientProcs > 0 {
		bad("--procs and --client-procs: give one (--procs sets the servers' too)")
	}
	if c.Streams < 0 {
		bad("--streams must be ≥ 0 (0 = kahuna.Client's default, one), got %d", c.Streams)
	}
	seen := map[string]bool{}
	for i, name := range c.Targets {
		t, _, ok, err := reg.resolve(name, c.Durability)
		if err != nil {
			bad("%v", err)
			continue
		}
		if !ok {
			bad("unknown target %q (have %s)", name, reg.names())
			continue
		}
		if seen[t.Name] {
			bad("target %q given twice", name)
		}
		seen[t.Name] = true
		c.Targets[i] = t.Name
		if t.NeedsEndpoints && len(c.Endpoints) == 0 {
			example := "http://127.0.0.1:2070"
			if t.Name == "grpc" {
				example = "http://127.0.0.1:2072, the native gRPC port"
			}
			bad("target %q needs --endpoints (e.g. %s)", t.Name, example)
		}
	}
	if !slices.Contains(workloads, c.Workload) {
		bad("--workload %q: want one of %s", c.Workload, strings.Join(workloads, ", "))
	}
	if c.Concurrency < 1 {
		bad("--concurrency must be ≥ 1, got %d", c.Concurrency)
	}
	if c.KeySpace < 0 {
		bad("--key-space must be ≥ 1 (0 = the workload's default), got %d", c.KeySpace)
	}
	if c.Extends < 0 {
		bad("--extends must be ≥ 0, got %d", c.Extends)
	}
	if c.TTL <= 0 || c.TTL > lease.MaxTTL {
		bad("--ttl must be > 0 and ≤ %v, got %v", lease.MaxTTL, c.TTL)
	}
	if c.TTL > 0 && c.TTL%time.Millisecond != 0 {
		bad("--ttl must be whole milliseconds (the wire carries ms), got %v", c.TTL)
	}
	if !c.Durability.Valid() {
		bad("--durability must be ephemeral or persistent")
	}
	if c.Rate < 0 {
		bad("--rate must be ≥ 0 (0 = closed loop), got %v", c.Rate)
	}
	if c.Duration <= 0 {
		bad("--duration must be > 0, got %v", c.Duration)
	}
	if c.Warmup < 0 {
		bad("--warmup must be ≥ 0, got %v", c.Warmup)
	}
	if c.Timeout < 0 {
		bad("--timeout must be ≥ 0 (0 = none), got %v", c.Timeout)
	}
	if c.Kind == "" {
		c.Kind = KindMutex
	}
	if c.Workload == WorkloadHotWait {
		if c.Hold < 0 {
			bad("--hold must be ≥ 0, got %v", c.Hold)
		}
		if c.Wait <= 0 || c.Wait > lease.MaxWait {
			bad("--wait must be > 0 and ≤ %v, got %v", lease.MaxWait, c.Wait)
		}
		switch {
		case !slices.Contains(kinds, c.Kind):
			bad("--kind %q: want one of %s", c.Kind, strings.Join(kinds, ", "))
		case c.Kind == KindSemaphore && (c.Limit < 1 || c.Limit > lease.MaxPermits):
			bad("--limit must be 1 to %d, got %d", lease.MaxPermits, c.Limit)
		case c.Kind == KindRWLock && !(c.Reads >= 0 && c.Reads <= 1):
			bad("--reads must be 0 to 1, got %v", c.Reads)
		case c.Kind != KindMutex && c.Durability != lease.Persistent:
			bad("--kind %s needs --durability persistent: the nodes keep semaphores and read/write locks only so", c.Kind)
		}
		if c.Timeout > 0 && c.Timeout <= c.Wait+c.Hold {
			bad("--timeout %v must exceed --wait + --hold (%v), or be 0: a grant op waits, then holds", c.Timeout, c.Wait+c.Hold)
		}
	}
	if !slices.Contains(formats, c.Format) {
		bad("--format %q: want console, json or csv", c.Format)
	}
	if ext := strings.ToLower(filepath.Ext(c.Plot)); c.Plot != "" && ext != ".png" && ext != ".svg" {
		bad("--plot %q: the file name must end in .png or .svg", c.Plot)
	}
	if c.Workload != WorkloadHotWait && c.Kind != KindMutex {
		bad("--kind %s goes with --workload hot-wait only", c.Kind)
	}
	if c.Workload == WorkloadMixed && len(c.Mix) == 0 {
		bad("--mix is empty")
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return nil
}

// parseMix reads "lock=50,get=40,extend=10".
func parseMix(s string) ([]MixPart, error) {
	var parts []MixPart
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		op, w, ok := strings.Cut(item, "=")
		if !ok {
			return nil, fmt.Errorf("--mix: %q is not op=weight", item)
		}
		if op != rowLock && op != rowExtend && op != rowGet {
			return nil, fmt.Errorf("--mix: unknown operation %q (want lock, extend or get)", op)
		}
		n, err := strconv.Atoi(w)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("--mix: weight of %s must be a whole number ≥ 0, got %q", op, w)
		}
		if n > 0 {
			parts = append(parts, MixPart{Op: op, Weight: n})
		}
	}
	return parts, nil
}

// mixString is the inverse of parseMix, for reports.
func mixString(parts []MixPart) string {
	s := make([]string, len(parts))
	for i, p := range parts {
		s[i] = p.Op + "=" + strconv.Itoa(p.Weight)
	}
	return strings.Join(s, ",")
}

// parseDurability reads ephemeral|persistent (or Kahuna's 0|1).
func parseDurability(s string) (lease.Durability, error) {
	switch strings.ToLower(s) {
	case "ephemeral", "0":
		return lease.Ephemeral, nil
	case "persistent", "1":
		return lease.Persistent, nil
	}
	return -1, fmt.Errorf("--durability %q: want ephemeral or persistent", s)
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}
