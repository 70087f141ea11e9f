package node

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/kahunago/kahuna/admin"
)

// Peer reachability, as Raft's connection events report it: a first
// failure (members start one after another) is not news; a change is, at
// info; repeats are not.
func TestPeerUpDownLoggedOnChange(t *testing.T) {
	var buf bytes.Buffer
	ps := newPeers(map[uint64]admin.Member{1: {}, 2: {}, 3: {}}, 1)
	ps.logger = slog.New(slog.NewTextHandler(&buf, nil)) // info and above
	for _, e := range []struct {
		id uint64
		up bool
	}{{2, false}, {2, true}, {2, true}, {3, true}, {2, false}, {2, false}} {
		ps.observe(e.id, e.up)
	}
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		got = append(got, l[strings.Index(l, "msg="):])
	}
	want := []string{`msg="peer up" peer=2`, `msg="peer up" peer=3`, `msg="peer down" peer=2`}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("logged\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	stats := ps.stats()
	byID := map[uint64]PeerStats{}
	for _, s := range stats {
		byID[s.ID] = s
	}
	if len(stats) != 2 || byID[2] != (PeerStats{ID: 2, Known: true, Reachable: false}) || byID[3] != (PeerStats{ID: 3, Known: true, Reachable: true}) {
		t.Errorf("stats %v", stats)
	}
}
