package durability

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

type captureHandler struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *captureHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *captureHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.recs = append(h.recs, r)
	h.mu.Unlock()
	return nil
}
func (h *captureHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *captureHandler) WithGroup(string) slog.Handler      { return h }

func TestRaftLoggerAdapter(t *testing.T) {
	h := &captureHandler{}
	prev := raftLog.Swap(slog.New(h))
	var all slog.Leveler = slog.LevelDebug
	prevLevel := raftLevel.Swap(&all) // see every mapped level
	t.Cleanup(func() { raftLog.Store(prev); raftLevel.Store(prevLevel) })

	raftLogger{pkg: "transport"}.Errorf("send batch failed, target %s", "x:1")
	raftLogger{pkg: "transport"}.Errorf("invalid payload checksum")
	raftLogger{pkg: "raft"}.Warningf("%s dropped ReadIndex, not ready", "n1")
	raftLogger{pkg: "raft"}.Infof("became leader")
	raftLogger{pkg: "logdb"}.Errorf("disk %s", "full")
	want := []slog.Level{slog.LevelDebug, slog.LevelError, slog.LevelDebug, slog.LevelInfo, slog.LevelError}
	if len(h.recs) != len(want) {
		t.Fatalf("%d records, want %d", len(h.recs), len(want))
	}
	for i, r := range h.recs {
		if r.Level != want[i] {
			t.Errorf("record %d %q at %v, want %v", i, r.Message, r.Level, want[i])
		}
	}
	if h.recs[4].Message != "disk full" {
		t.Errorf("message %q", h.recs[4].Message)
	}

	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "boom 7") {
			t.Fatalf("Panicf recovered %v", r)
		}
	}()
	raftLogger{pkg: "raft"}.Panicf("boom %d", 7)
	t.Fatal("Panicf returned")
}

// By default only warnings and errors of the libraries pass: their Info
// lines, and the routine election steps dragonboat logs as warnings, do
// not, whatever the Logger's own level; a shard tag becomes a partition.
func TestLibraryLogsWarnAndAboveByDefault(t *testing.T) {
	h := &captureHandler{}
	prev := raftLog.Swap(slog.New(h))
	prevLevel := raftLevel.Swap(nil)
	t.Cleanup(func() { raftLog.Store(prev); raftLevel.Store(prevLevel) })

	raftLogger{pkg: "raft"}.Infof("%s became leader", "[00003:00001]")
	raftLogger{pkg: "raft"}.Debugf("step")
	raftLogger{pkg: "raft"}.Warningf("[f:1,l:3,t:1,c:3,a:3] [00003:00001] t1 become followerKE after receiving higher term from n00002")
	raftLogger{pkg: "raft"}.Warningf("[f:1,l:3,t:1,c:3,a:3] [00004:00002] t1 has lost quorum")
	badgerLogger{slog.New(h)}.Infof("compaction")
	badgerLogger{slog.New(h)}.Warningf("disk slow")
	if len(h.recs) != 2 {
		for _, r := range h.recs {
			t.Logf("%v %q", r.Level, r.Message)
		}
		t.Fatalf("%d records, want the lost quorum and badger's warning", len(h.recs))
	}
	r := h.recs[0]
	attrs := map[string]string{}
	r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.String(); return true })
	if r.Level != slog.LevelWarn || strings.Contains(r.Message, "00004") || attrs["partition"] != "3" || attrs["replica"] != "2" || attrs["pkg"] != "raft" {
		t.Errorf("record %v %q %v: want a warning naming partition 3, replica 2, without the shard tag", r.Level, r.Message, attrs)
	}

	var info slog.Leveler = slog.LevelInfo // asked for: RaftConfig.LibraryLogLevel
	raftLevel.Store(&info)
	raftLogger{pkg: "raft"}.Infof("became leader")
	if len(h.recs) != 3 || h.recs[2].Level != slog.LevelInfo {
		t.Errorf("with LibraryLogLevel info, dragonboat's Info lines should pass: %d records", len(h.recs))
	}
}
