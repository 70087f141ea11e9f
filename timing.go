package kahuna

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/kahunago/kahuna/raftnet"
)

// Raft timing. A leader lease (partition.LeaseFor) and a new leader's wait
// for the old lease to run out (partition.TakeoverWaitFor) are computed
// from the Raft tick and election ticks, each member from its own; the
// argument that no two leaders serve at once assumes one timing on every
// member. Two things keep it so:
//
//   - Members of different timings do not talk Raft: the TCP transport
//     states the timing when a connection opens and each end refuses a
//     peer of another (raftnet.Timing), so only a majority of one timing
//     can elect a leader. Open's error says which members differ.
//   - A member whose data dir last ran under another timing waits, before
//     Raft starts, until every lease it may have acknowledged under the
//     old timing has run out (settleTiming): the takeover argument's "the
//     ack comes before the vote" holds across the restart only if the old
//     lease is over by the vote, and the new leader's wait is computed
//     from the new timing.

// ErrRaftTimingMismatch is in Open's error when members refused Raft
// connections for running another --raft-rtt (Config.RaftRTT) than this
// node: every member must use the same value.
var ErrRaftTimingMismatch = raftnet.ErrTimingMismatch

// raftTiming follows the outcome of the Raft handshakes with other members
// (durability.RaftConfig.OnPeerTiming).
type raftTiming struct {
	self    raftnet.Timing
	mu      sync.Mutex
	refused map[string]raftnet.Timing // by Raft address, while its last handshake was refused
}

func newRaftTiming(self raftnet.Timing) *raftTiming {
	return &raftTiming{self: self, refused: map[string]raftnet.Timing{}}
}

func (rt *raftTiming) observe(addr string, t raftnet.Timing, refused bool) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if refused {
		rt.refused[addr] = t
	} else {
		delete(rt.refused, addr)
	}
}

// refusals describes the members whose Raft connections are refused for
// their timing ("" if none), naming them by ID where members knows them.
func (rt *raftTiming) refusals(members map[uint64]Member) string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if len(rt.refused) == 0 {
		return ""
	}
	byAddr := map[string]uint64{}
	for id, m := range members {
		byAddr[m.RaftAddress] = id
	}
	addrs := make([]string, 0, len(rt.refused))
	for a := range rt.refused {
		addrs = append(addrs, a)
	}
	slices.SortFunc(addrs, func(a, b string) int { return cmp.Or(cmp.Compare(byAddr[a], byAddr[b]), strings.Compare(a, b)) })
	var peers []string
	for _, a := range addrs {
		who := a
		if id, ok := byAddr[a]; ok {
			who = fmt.Sprintf("member %d (%s)", id, a)
		}
		peers = append(peers, fmt.Sprintf("%s runs %s", who, rt.describe(rt.refused[a])))
	}
	return fmt.Sprintf("%s; this member runs %s, and every member must use the same value (--raft-rtt, Config.RaftRTT)",
		strings.Join(peers, ", "), rt.describe(rt.self))
}

// describe names a timing as the operator sets it.
func (rt *raftTiming) describe(t raftnet.Timing) string {
	if t.IsZero() {
		return "no stated timing"
	}
	if t.ElectionTicks == rt.self.ElectionTicks {
		return "--raft-rtt " + t.RTT.String()
	}
	return fmt.Sprintf("--raft-rtt %v with elections after %d ticks", t.RTT, t.ElectionTicks)
}
