package durability

import (
	"testing"

	"github.com/lni/dragonboat/v4/raftio"
)

func TestPeerEventsNameMembers(t *testing.T) {
	if newPeerEvents(map[uint64]string{1: "a:1"}, 1, nil) != nil {
		t.Fatal("no callback: no listener")
	}
	type call struct {
		id uint64
		up bool
	}
	var calls []call
	l := newPeerEvents(map[uint64]string{1: "a:1", 2: "b:2", 3: "c:3"}, 1, func(id uint64, up bool) { calls = append(calls, call{id, up}) })
	l.ConnectionEstablished(raftio.ConnectionInfo{Address: "b:2"})
	l.ConnectionFailed(raftio.ConnectionInfo{Address: "c:3"})
	l.ConnectionFailed(raftio.ConnectionInfo{Address: "b:2", SnapshotConnection: true}) // snapshot streams do not count
	l.ConnectionFailed(raftio.ConnectionInfo{Address: "x:9"})                           // not a member
	l.ConnectionEstablished(raftio.ConnectionInfo{Address: "a:1"})                      // self
	if len(calls) != 2 || calls[0] != (call{2, true}) || calls[1] != (call{3, false}) {
		t.Errorf("calls %v", calls)
	}
}
