//go:build race

package e2e

// raceEnabled: the test runs under -race, so the binaries are built with
// -race too and a data race in a node fails its exit code (66).
const raceEnabled = true
