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
	t.Cleanup(func() { raftLog.Store(prev) })

	raftLogger{pkg: "transport"}.Errorf("send batch failed, target %s", "x:1")
	raftLogger{pkg: "transport"}.Errorf("invalid payload checksum")
	raftLogger{pkg: "raft"}.Warningf("%s dropped ReadIndex, not ready", "n1")
	raftLogger{pkg: "raft"}.Infof("became leader")
	raftLogger{pkg: "logdb"}.Errorf("disk %s", "full")
	want := []slog.Level{slog.LevelDebug, slog.LevelError, slog.LevelDebug, slog.LevelDebug, slog.LevelError}
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
