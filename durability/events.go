package durability

import "github.com/lni/dragonboat/v4/raftio"

// peerEvents turns dragonboat's connection events into RaftConfig.OnPeer
// calls: a message stream to a member's Raft address established (up) or
// failed (down). Snapshot streams and every other system event are ignored.
// It runs on dragonboat's event goroutine.
type peerEvents struct {
	byAddr map[string]uint64
	fn     func(id uint64, up bool)
}

// newPeerEvents returns nil when there is nobody to tell.
func newPeerEvents(members map[uint64]string, self uint64, fn func(uint64, bool)) raftio.ISystemEventListener {
	if fn == nil {
		return nil
	}
	e := &peerEvents{byAddr: map[string]uint64{}, fn: fn}
	for id, addr := range members {
		if id != self {
			e.byAddr[addr] = id
		}
	}
	return e
}

func (e *peerEvents) connection(info raftio.ConnectionInfo, up bool) {
	if info.SnapshotConnection {
		return
	}
	if id, ok := e.byAddr[info.Address]; ok {
		e.fn(id, up)
	}
}

func (e *peerEvents) ConnectionEstablished(info raftio.ConnectionInfo) { e.connection(info, true) }
func (e *peerEvents) ConnectionFailed(info raftio.ConnectionInfo)      { e.connection(info, false) }

func (*peerEvents) NodeHostShuttingDown()                     {}
func (*peerEvents) NodeUnloaded(raftio.NodeInfo)              {}
func (*peerEvents) NodeDeleted(raftio.NodeInfo)               {}
func (*peerEvents) NodeReady(raftio.NodeInfo)                 {}
func (*peerEvents) MembershipChanged(raftio.NodeInfo)         {}
func (*peerEvents) SendSnapshotStarted(raftio.SnapshotInfo)   {}
func (*peerEvents) SendSnapshotCompleted(raftio.SnapshotInfo) {}
func (*peerEvents) SendSnapshotAborted(raftio.SnapshotInfo)   {}
func (*peerEvents) SnapshotReceived(raftio.SnapshotInfo)      {}
func (*peerEvents) SnapshotRecovered(raftio.SnapshotInfo)     {}
func (*peerEvents) SnapshotCreated(raftio.SnapshotInfo)       {}
func (*peerEvents) SnapshotCompacted(raftio.SnapshotInfo)     {}
func (*peerEvents) LogCompacted(raftio.EntryInfo)             {}
func (*peerEvents) LogDBCompacted(raftio.EntryInfo)           {}
