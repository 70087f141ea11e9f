package checker

import (
	"encoding/json"
	"flag"
	"os"
	"testing"
	"time"
)

var historyFile = flag.String("checker.history", "", "a history in JSON (as the fault tests dump it with -faults.dump) to check")

// TestHistoryFile re-checks a dumped history:
//
//	go test ./checker -run TestHistoryFile -checker.history=/tmp/faults-7.history.json -v
func TestHistoryFile(t *testing.T) {
	if *historyFile == "" {
		t.Skip("set -checker.history")
	}
	b, err := os.ReadFile(*historyFile)
	if err != nil {
		t.Fatal(err)
	}
	var h History
	if err := json.Unmarshal(b, &h); err != nil {
		t.Fatal(err)
	}
	r := Check(h, Options{Margin: 50 * time.Millisecond, Timeout: 5 * time.Minute, VisualizePath: *historyFile + ".html"})
	t.Logf("%+v: %d hold windows, %d grants; linearizability %s in %v (resources %v)",
		r.Stats, r.HoldWindows, r.FencedGrants, r.Linearizable.Result, r.Linearizable.Elapsed, r.Linearizable.Failed)
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
}
