package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Program describes a kahuna-bench command: the core one, or one that adds
// targets and flags (the peers' command in bench/peers).
type Program struct {
	Name    string
	Targets Registry
	// Flags registers the program's own flags; nil for none. They are
	// parsed with the common ones, before any target opens.
	Flags func(fs *flag.FlagSet)
}

// Main runs the program with args (without the program name) and returns
// its exit code: 0 done, 1 a target could not open, failed more
// operations than it completed, or the report failed, 2 bad flags.
// The report goes to stdout (or --output); the live line, logs and errors
// go to stderr. Ending ctx (a signal) stops the run and reports what was
// measured so far.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, p Program) int {
	c, err := parseArgs(p.Name, args, p.Targets, p.Flags, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintf(stderr, "%s: %s\n", p.Name, line)
		}
		return 2
	}
	if c.Procs > 0 {
		// Before any target opens: a server a target starts inherits the
		// environment, so it runs with as many Ps as the callers.
		runtime.GOMAXPROCS(c.Procs)
		if err := os.Setenv("GOMAXPROCS", strconv.Itoa(c.Procs)); err != nil {
			fmt.Fprintf(stderr, "%s: --procs: %v\n", p.Name, err)
			return 1
		}
	}
	if c.ClientProcs > 0 {
		// The callers alone: a server a target starts must not inherit a
		// GOMAXPROCS from here, so it runs at Go's default.
		runtime.GOMAXPROCS(c.ClientProcs)
		if err := os.Unsetenv("GOMAXPROCS"); err != nil {
			fmt.Fprintf(stderr, "%s: --client-procs: %v\n", p.Name, err)
			return 1
		}
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: c.LogLevel}))
	// dragonboat (in the embedded node) logs through the standard logger:
	// route it to slog at debug level so it stays out of the report.
	log.SetFlags(0)
	log.SetOutput(slog.NewLogLogger(logger.Handler(), slog.LevelDebug).Writer())

	seed := c.Seed
	for seed == 0 {
		seed = rand.Uint64()
	}
	var progress io.Writer
	if c.Progress {
		progress = stderr
	}
	if c.CPUProfile != "" {
		stop, err := startCPUProfile(c.CPUProfile)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", p.Name, err)
			return 1
		}
		defer stop()
	}

	report := Report{Params: newParameters(c, seed, time.Now())}
	code := 0
	for i, run := range runsOf(c.Targets, c.Rounds) {
		if ctx.Err() != nil {
			break
		}
		t, d, _, _ := p.Targets.resolve(run.target, c.Durability)
		if len(c.Targets) > 1 || run.round > 0 {
			fmt.Fprintf(stderr, "%s: run %d of %d: %s\n", p.Name, i+1, len(c.Targets)*c.Rounds, t.Name)
		}
		tc := *c
		tc.Durability = d // NAME:persistent
		runtime.GC()      // one target's garbage is not the next one's bill
		res, err := runOne(ctx, &tc, t, seed, logger, progress)
		res.Round = run.round
		if oerr := (*openError)(nil); errors.As(err, &oerr) {
			// Not installed, not running: said so, and never a pass.
			fmt.Fprintf(stderr, "%s: %s SKIPPED, not measured: %v\n", p.Name, t.Name, oerr.err)
			if !slices.ContainsFunc(report.Skipped, func(s Skip) bool { return s.Target == t.Name }) {
				report.Skipped = append(report.Skipped, Skip{Target: t.Name, Reason: oneLine(oerr.err.Error())})
			}
			code = 1
			continue
		}
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", p.Name, err)
			code = 1
			if res.Target == "" {
				continue
			}
		}
		if why := res.failing(); why != "" {
			fmt.Fprintf(stderr, "%s: %s FAILED: %s\n", p.Name, t.Name, why)
			code = 1
		}
		report.Results = append(report.Results, res)
	}
	if ctx.Err() != nil {
		fmt.Fprintf(stderr, "%s: interrupted; reporting what was measured\n", p.Name)
		code = 1
	}
	if err := writeReport(c, report, stdout); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", p.Name, err)
		return 1
	}
	if c.Plot != "" && len(report.Results) > 0 {
		if err := writePlot(c.Plot, report.Params, report.Results); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", p.Name, err)
			return 1
		}
	}
	return code
}

// writeReport prints the report to stdout or --output.
func writeReport(c *Config, r Report, stdout io.Writer) error {
	if c.Output == "" {
		return r.write(stdout, c.Format)
	}
	f, err := os.Create(c.Output)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := r.write(f, c.Format); err != nil {
		_ = f.Close()
		return fmt.Errorf("report %s: %w", c.Output, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("report %s: %w", c.Output, err)
	}
	return nil
}

// startCPUProfile profiles every run (warmups included) until stop.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}, nil
}
