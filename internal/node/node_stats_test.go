package node_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/kahunago/kahuna/admin"
	"github.com/kahunago/kahuna/internal/node"
	"github.com/kahunago/kahuna/lease"
)

// records is a slog.Handler that keeps every record.
type records struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *records) Enabled(context.Context, slog.Level) bool { return true }
func (h *records) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.recs = append(h.recs, r.Clone())
	h.mu.Unlock()
	return nil
}
func (h *records) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *records) WithGroup(string) slog.Handler      { return h }

// find returns the attributes of the records with message msg.
func (h *records) find(msg string) []map[string]slog.Value {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []map[string]slog.Value
	for _, r := range h.recs {
		if r.Message != msg {
			continue
		}
		attrs := map[string]slog.Value{"level": slog.StringValue(r.Level.String())}
		r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value; return true })
		out = append(out, attrs)
	}
	return out
}

func TestEveryRequestIsLoggedAtDebugAndObserved(t *testing.T) {
	h := &records{}
	var mu sync.Mutex
	var events []admin.RequestEvent
	n, err := node.Open(node.Config{
		Logger:  slog.New(h),
		Observe: func(ev admin.RequestEvent) { mu.Lock(); events = append(events, ev); mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ctx := context.Background()
	if r, err := n.TryLock(ctx, "obs/a", []byte("me"), time.Minute, lease.Ephemeral); err != nil || r.Status != lease.Locked {
		t.Fatalf("TryLock: %v %v", r, err)
	}
	if r, err := n.TryLock(ctx, "obs/a", []byte("you"), time.Minute, lease.Ephemeral); err != nil || r.Status != lease.Busy {
		t.Fatalf("second TryLock: %v %v", r, err)
	}
	if _, r, err := n.Get(ctx, "", lease.Persistent); err != nil || r.Status != lease.InvalidInput {
		t.Fatalf("Get of no name: %v %v", r, err)
	}

	lines := h.find("request")
	if len(lines) != 3 {
		t.Fatalf("%d request lines, want 3: %v", len(lines), lines)
	}
	want := []struct{ op, durability, status string }{
		{"TryLock", "Ephemeral", "Locked"}, {"TryLock", "Ephemeral", "Busy"}, {"Get", "Persistent", "InvalidInput"},
	}
	for i, l := range lines {
		w := want[i]
		if l["level"].String() != "DEBUG" || l["op"].String() != w.op || l["durability"].String() != w.durability || l["status"].String() != w.status {
			t.Errorf("line %d: %v, want %+v at DEBUG", i, l, w)
		}
		if lat, ok := l["latency"]; !ok || lat.Kind() != slog.KindDuration || lat.Duration() <= 0 {
			t.Errorf("line %d: latency %v", i, l["latency"])
		}
		if _, ok := l["forwarded_to"]; ok {
			t.Errorf("line %d: a single node forwards nothing: %v", i, l)
		}
	}
	if lines[0]["resource"].String() != "obs/a" || lines[0]["partition"].Int64() != int64(n.Partition("obs/a")) {
		t.Errorf("line 0 resource/partition: %v", lines[0])
	}

	mu.Lock()
	defer mu.Unlock()
	if len(events) != 3 || events[0].Op != lease.TryLock || events[0].Status != lease.Locked || events[1].Status != lease.Busy ||
		events[2].Durability != lease.Persistent || events[2].Latency <= 0 || events[0].Forwarded || events[0].ForwardedTo != 0 {
		t.Errorf("Observe got %+v", events)
	}
}

func TestPartitionAndPeerStats(t *testing.T) {
	n, err := node.Open(node.Config{Partitions: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ps := n.PartitionStats()
	if len(ps) != 3 {
		t.Fatalf("%d partitions", len(ps))
	}
	for i, p := range ps {
		if p.Partition != i || p.Leader != 1 || p.Term == 0 || !p.Serving || p.LeaderChanges != 1 {
			t.Errorf("partition %d: %+v, want led and served by node 1 after one leader change", i, p)
		}
	}
	if peers := n.PeerStats(); len(peers) != 0 {
		t.Errorf("a single node has no peers: %v", peers)
	}
}
