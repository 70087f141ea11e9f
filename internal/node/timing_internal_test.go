package node

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kahunago/kahuna/raftnet"
)

// The timing a data dir ran under survives a restart, and a damaged record
// is an error, not a timing.
func TestRecordedTiming(t *testing.T) {
	dir := t.TempDir()
	if _, ok, err := recordedTiming(dir); ok || err != nil {
		t.Fatalf("new dir: ok %v, %v", ok, err)
	}
	want := raftnet.Timing{RTT: 1500 * time.Microsecond, ElectionTicks: 10}
	if err := writeTiming(dir, want); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := recordedTiming(dir); !ok || err != nil || got != want {
		t.Fatalf("recorded %+v, %v, %v; want %+v", got, ok, err, want)
	}
	for _, bad := range []string{"", "rtt=10ms", "rtt=fast election-ticks=10", "rtt=10ms election-ticks=-1"} {
		if err := os.WriteFile(filepath.Join(dir, timingFile), []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, _, err := recordedTiming(dir); err == nil || !strings.Contains(err.Error(), timingFile) {
			t.Errorf("%q read without an error naming the file: %v", bad, err)
		}
	}
}
