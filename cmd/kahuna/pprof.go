package main

import (
	"flag"
	"fmt"
	"net/http"
	httppprof "net/http/pprof"
	"os"
	"runtime/pprof"
)

var (
	// cpuProfilePath is --cpuprofile: where to write a CPU profile of the
	// whole run (for performance work; off by default).
	cpuProfilePath string
	// enablePprof is --enable-pprof: serve Go's profiles over HTTP.
	enablePprof bool
)

// addProfileFlags registers the profiling flags (hooked into parseFlags).
func addProfileFlags(fs *flag.FlagSet) {
	fs.StringVar(&cpuProfilePath, "cpuprofile", "", "write a CPU profile of the whole run to this file (written on shutdown)")
	fs.BoolVar(&enablePprof, "enable-pprof", false, "serve Go's profiles and execution traces (net/http/pprof) at /debug/pprof/ on the HTTP ports, behind the auth token like the admin API")
}

// pprofHandlers are the /debug/pprof/ handlers, for --enable-pprof: a
// CPU profile or an execution trace of a loaded node, taken while it runs
// (curl 'localhost:2070/debug/pprof/trace?seconds=2' > trace.out).
func pprofHandlers() map[string]http.Handler {
	return map[string]http.Handler{
		"/debug/pprof/":        http.HandlerFunc(httppprof.Index),
		"/debug/pprof/cmdline": http.HandlerFunc(httppprof.Cmdline),
		"/debug/pprof/profile": http.HandlerFunc(httppprof.Profile),
		"/debug/pprof/symbol":  http.HandlerFunc(httppprof.Symbol),
		"/debug/pprof/trace":   http.HandlerFunc(httppprof.Trace),
	}
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
