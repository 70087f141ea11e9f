package bench

import (
	"fmt"
	"io"
	"runtime"
	"strings"
	"time"
)

// Report is everything one invocation prints.
type Report struct {
	Params  Parameters
	Results []Result
	Skipped []Skip // targets that could not open
}

// Skip is a target that was not measured, and why.
type Skip struct {
	Target, Reason string
}

// Parameters record the run's conditions, so a number can be quoted with
// them (and repeated: the seed is the one actually used).
type Parameters struct {
	Targets     []string
	Workload    string
	Mix         string // mixed workload only
	Extends     int    // extend and mixed workloads
	Duration    time.Duration
	Warmup      time.Duration
	Concurrency int
	Rate        float64
	KeySpace    int
	KeyPrefix   string
	TTL         time.Duration
	Durability  string
	Endpoints   []string
	Seed        uint64
	Timeout     time.Duration
	Rounds      int           // above 1: each target ran this many times
	Procs       int           // --procs: GOMAXPROCS set for the run and its servers; 0 if not
	ClientProcs int           // --client-procs: GOMAXPROCS set for the run alone; 0 if not
	Hold, Wait  time.Duration // hot-wait only
	// Kind, hot-wait's: "semaphore of 8 permits", "rwlock, 90% reads", or
	// "" for a mutex.
	Kind       string
	GoMaxProcs int
	NumCPU     int
	GoVersion  string
	Platform   string
	Started    time.Time
}

func newParameters(c *Config, seed uint64, started time.Time) Parameters {
	p := Parameters{
		Targets:     c.Targets,
		Workload:    c.Workload,
		Duration:    c.Duration,
		Warmup:      c.Warmup,
		Concurrency: c.Concurrency,
		Rate:        c.Rate,
		KeySpace:    c.keys(),
		KeyPrefix:   c.keyPrefix(),
		TTL:         c.TTL,
		Durability:  strings.ToLower(c.Durability.String()),
		Endpoints:   c.Endpoints,
		Seed:        seed,
		Timeout:     c.Timeout,
		Rounds:      max(c.Rounds, 1),
		Procs:       c.Procs,
		ClientProcs: c.ClientProcs,
		GoMaxProcs:  runtime.GOMAXPROCS(0),
		NumCPU:      runtime.NumCPU(),
		GoVersion:   runtime.Version(),
		Platform:    runtime.GOOS + "/" + runtime.GOARCH,
		Started:     started,
	}
	if c.Workload == WorkloadMixed {
		p.Mix = mixString(c.Mix)
	}
	if c.Workload == WorkloadHotWait {
		p.Hold, p.Wait = c.Hold, c.Wait
		switch c.Kind {
		case KindSemaphore:
			p.Kind = fmt.Sprintf("semaphore of %d permits, one per acquire", c.Limit)
		case KindRWLock:
			p.Kind = fmt.Sprintf("rwlock, %.0f%% reads", 100*c.Reads)
		}
	}
	if c.Workload == WorkloadExtend || c.Workload == WorkloadMixed {
		p.Extends = c.Extends
	}
	return p
}

// write prints r in format (console, json or csv).
func (r Report) write(w io.Writer, format string) error {
	switch format {
	case "json":
		return r.writeJSON(w)
	case "csv":
		return r.writeCSV(w)
	case "console":
		return r.writeConsole(w)
	}
	return fmt.Errorf("unknown format %q", format)
}
