package main

import (
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
)

// cpuProfilePath is --cpuprofile: where to write a CPU profile of the
// whole run (for performance work; off by default).
var cpuProfilePath string

// addProfileFlags registers the profiling flags (hooked into parseFlags).
func addProfileFlags(fs *flag.FlagSet) {
	fs.StringVar(&cpuProfilePath, "cpuprofile", "", "write a CPU profile of the whole run to this file (written on shutdown)")
}

// startProfiling starts the profiles asked for; stop writes them out. It
// is hooked into run, so the profile ends with a clean shutdown (SIGINT
// or SIGTERM).
func startProfiling() (stop func(), err error) {
	if cpuProfilePath == "" {
		return func() {}, nil
	}
	f, err := os.Create(cpuProfilePath)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
