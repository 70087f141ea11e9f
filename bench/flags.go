package bench

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/kahunago/kahuna/lease"
)

// parseArgs reads the command line (without the program name) into a
// validated Config. extra registers a program's own flags (the peers'
// server options) on the same flag set. Usage and parse errors go to out.
func parseArgs(name string, args []string, reg Registry, extra func(*flag.FlagSet), out io.Writer) (*Config, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	c := &Config{}
	var target, compare, workload, mix, durability, endpoints, logLevel string
	fs.StringVar(&target, "target", "embedded", "what to benchmark (one of the Targets listed above)")
	fs.StringVar(&compare, "compare", "", "comma-separated targets to run one after another with the same workload, e.g. embedded,mutex (overrides --target); NAME:persistent or NAME:ephemeral overrides --durability for that target")
	fs.StringVar(&workload, "workload", WorkloadLock, "lock, hot, extend, get, mixed or hot-wait")
	fs.DurationVar(&c.Hold, "hold", 0, "hot-wait: how long each contender holds a grant before it unlocks")
	fs.DurationVar(&c.Wait, "wait", DefaultWait, "hot-wait: the longest one acquire waits (on the server for a WaitLocker, else polling)")
	fs.StringVar(&c.Kind, "kind", KindMutex, "hot-wait: what the contenders take: mutex, semaphore (one permit of --limit) or rwlock (a read lock for --reads of the acquires, else the write lock); kahuna targets, persistent")
	fs.IntVar(&c.Limit, "limit", DefaultLimit, "hot-wait --kind semaphore: the semaphore's permits")
	fs.Float64Var(&c.Reads, "reads", DefaultReads, "hot-wait --kind rwlock: the fraction of acquires that take a read lock")
	fs.StringVar(&mix, "mix", DefaultMix, "mixed workload: weights of lock, extend and get")
	fs.IntVar(&c.Extends, "extends", DefaultExtends, "extend workload: extensions per hold")
	fs.IntVar(&c.KeySpace, "key-space", 0, "number of distinct keys (0 = 10000, or 1 for the hot workload)")
	fs.StringVar(&c.KeyPrefix, "key-prefix", DefaultKeyPrefix, "prefix of every key (kahuna partitions by the part before the last '/')")
	fs.DurationVar(&c.TTL, "ttl", DefaultTTL, "lease of every lock")
	fs.StringVar(&durability, "durability", "ephemeral", "ephemeral or persistent (kahuna targets)")
	fs.IntVar(&c.Concurrency, "concurrency", DefaultConcurrency, "concurrent callers (closed loop), or most operations in flight (open loop)")
	fs.Float64Var(&c.Rate, "rate", 0, "open loop: operations per second over all callers, latency measured from each one's intended start (0 = closed loop)")
	fs.DurationVar(&c.Duration, "duration", DefaultDuration, "measured time per target")
	fs.DurationVar(&c.Warmup, "warmup", DefaultWarmup, "unmeasured time before it, per target")
	fs.DurationVar(&c.Timeout, "timeout", DefaultTimeout, "per-operation timeout; an operation past it counts as a timeout (0 = none)")
	fs.IntVar(&c.Rounds, "rounds", 1, "run the targets this many times, in turn, forward then backward (a, b, b, a, ...); several targets get each one's median and the median and range of each ratio over the rounds")
	fs.Uint64Var(&c.Seed, "seed", 0, "seed of the key and mix choices (0 = random, reported so a run can be repeated)")
	fs.StringVar(&c.Format, "format", "console", "console, json or csv")
	fs.StringVar(&c.Output, "output", "", "write the report to this file instead of stdout")
	fs.StringVar(&c.Plot, "plot", "", "draw the latency percentile distribution of every target to this .png or .svg")
	fs.StringVar(&c.CPUProfile, "cpuprofile", "", "write a CPU profile of the runs to this file")
	fs.BoolVar(&c.Progress, "progress", true, "print a live line each second on stderr")
	fs.IntVar(&c.ClientProcs, "client-procs", 0, "GOMAXPROCS of this process alone: the callers, as a load generator sized to a core, while every server it starts runs at Go's default (0 = Go's default); embedded targets run in this process, so at as many Ps (docs/benchmarks.md)")
	fs.IntVar(&c.Procs, "procs", 0, "GOMAXPROCS of this process and of every server it starts, which inherit it (0 = Go's default, a P per core, or $GOMAXPROCS); with client and servers on the same few cores, 1 keeps their Go runtimes from contending (docs/benchmarks.md)")
	fs.StringVar(&logLevel, "log-level", "error", "debug, info, warn or error")
	fs.StringVar(&endpoints, "endpoints", "", "comma-separated URLs of a kahuna node for the grpc and rest targets, e.g. http://127.0.0.1:2072 (native gRPC) for grpc, http://127.0.0.1:2070 for rest; without it grpc serves an in-process node on a loopback port")
	fs.BoolVar(&c.Insecure, "insecure", false, "skip TLS certificate checks of https:// endpoints (grpc, rest)")
	fs.StringVar(&c.DataDir, "data-dir", "", "embedded: data dir (default: in memory for ephemeral, a temp dir on disk for persistent)")
	fs.IntVar(&c.Partitions, "partitions", 0, "embedded: Raft partitions (0 = kahuna's default)")
	fs.IntVar(&c.LockActors, "lock-actors", 0, "embedded: lock actors (0 = kahuna's default)")
	fs.IntVar(&c.Streams, "streams", 0, "grpc and native: batch streams the client opens to each endpoint (0 = kahuna.Client's default, one)")
	if extra != nil {
		extra(fs)
	}
	fs.Usage = func() {
		fmt.Fprintf(out, "Usage: %s [flags]\n\nBenchmarks lock services. With no flags: an in-process kahuna node, lock workload,\n"+
			"ephemeral locks, %d callers, %d keys, %v + %v warmup.\n\nTargets:\n%s\nFlags:\n",
			name, DefaultConcurrency, DefaultKeySpace, DefaultDuration, DefaultWarmup, reg.usage())
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}

	var errs []error
	c.Targets = []string{target}
	if compare != "" {
		c.Targets = splitList(compare)
	}
	c.Workload = workload
	var err error
	if c.Mix, err = parseMix(mix); err != nil {
		errs = append(errs, err)
	}
	if c.Durability, err = parseDurability(durability); err != nil {
		errs = append(errs, err)
		c.Durability = lease.Ephemeral // reported once, not again by validate
	}
	if err := c.LogLevel.UnmarshalText([]byte(logLevel)); err != nil {
		errs = append(errs, fmt.Errorf("--log-level %q: want debug, info, warn or error", logLevel))
	}
	c.Endpoints = splitList(endpoints)
	if err := c.validate(reg); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return c, nil
}
