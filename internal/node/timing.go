package node

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kahunago/kahuna/admin"
	"github.com/kahunago/kahuna/partition"
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
func (rt *raftTiming) refusals(members map[uint64]admin.Member) string {
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

// timingFile records, in the data dir, the Raft timing it last ran under.
const timingFile = "kahuna-raft-timing"

// settleTiming runs before Raft starts. If the data dir last ran under
// another timing, this member may have acknowledged leader leases as long
// as that timing's; it waits them out (TakeoverWaitFor of the old timing,
// from now, which is after the last acknowledgement of the old process),
// so that its first vote under the new timing comes after every such
// lease ended. Then it records self.
func (n *Node) settleTiming(self raftnet.Timing) error {
	if n.cfg.DataDir == "" {
		return nil
	}
	old, ok, err := recordedTiming(n.cfg.DataDir)
	if err != nil {
		return err
	}
	if ok && old == self {
		return nil
	}
	if ok && n.clustered() {
		wait := partition.TakeoverWaitFor(old.RTT, old.ElectionTicks)
		if n.cfg.knobs.UnsafeNoTimingWait {
			wait = 0
		}
		n.cfg.Logger.Warn("Raft timing changed since this data dir last ran: waiting out the leader leases it may have acknowledged before taking part in Raft",
			"was", fmt.Sprintf("--raft-rtt %v, %d election ticks", old.RTT, old.ElectionTicks),
			"now", fmt.Sprintf("--raft-rtt %v, %d election ticks", self.RTT, self.ElectionTicks),
			"wait", wait)
		time.Sleep(wait)
	}
	return writeTiming(n.cfg.DataDir, self)
}

// recordedTiming reads the timing dir last ran under; ok is false if it
// records none (a new data dir, or one from before timings were recorded).
func recordedTiming(dir string) (t raftnet.Timing, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, timingFile))
	if errors.Is(err, fs.ErrNotExist) {
		return raftnet.Timing{}, false, nil
	}
	if err != nil {
		return raftnet.Timing{}, false, fmt.Errorf("kahuna: data dir: %w", err)
	}
	for _, f := range strings.Fields(string(b)) {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "rtt":
			t.RTT, err = time.ParseDuration(v)
		case "election-ticks":
			t.ElectionTicks, err = strconv.Atoi(v)
		}
		if err != nil {
			break
		}
	}
	if err != nil || t.RTT <= 0 || t.ElectionTicks <= 0 {
		return raftnet.Timing{}, false, fmt.Errorf("kahuna: data dir %s: %s holds %q, not rtt=D election-ticks=N", dir, timingFile, b)
	}
	return t, true, nil
}

// writeTiming records t in dir, durably: the next start must see it even
// after a crash, or it would not wait out this timing's leases.
func writeTiming(dir string, t raftnet.Timing) error {
	path := filepath.Join(dir, timingFile)
	tmp := path + ".tmp"
	err := func() error {
		f, err := os.Create(tmp)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(f, "rtt=%v election-ticks=%d\n", t.RTT, t.ElectionTicks)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(tmp, path)
		}
		if err != nil {
			return err
		}
		d, err := os.Open(dir)
		if err != nil {
			return err
		}
		defer d.Close()
		return d.Sync()
	}()
	if err != nil {
		return fmt.Errorf("kahuna: data dir: record the Raft timing: %w", err)
	}
	return nil
}
