// Package e2e holds process-level tests: they build the kahuna and
// kahunactl binaries with `go build`, run kahuna nodes as processes on
// free loopback ports and drive them through kahunactl and the REST API,
// including a clean shutdown on SIGTERM and a restart on the same data.
//
//	go test ./e2e              # builds the binaries (with -race under -race)
//	go test -short ./e2e       # skips them
package e2e
