package raftnet

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"time"
)

// Timing is what a member's leader lease rests on (partition.LeaseFor and
// TakeoverWaitFor): its Raft tick and its election timeout in ticks. The
// lease is sound only between members of one timing: with a longer tick, a
// member's lease outlives the takeover wait of a member with a shorter one,
// so two would serve at once. Members therefore refuse Raft connections
// between different timings, each end checking the other's.
//
// Members that speak an older framing (version 1 of the preface, or
// dragonboat's own, from before timings were stated) cannot state theirs:
// they are accepted, with a warning, so that a cluster still upgrades one
// member at a time. Their timing is the operator's to keep equal: change
// --raft-rtt only once every member runs a version that checks it.
type Timing struct {
	RTT           time.Duration
	ElectionTicks int
}

// IsZero reports whether t states nothing.
func (t Timing) IsZero() bool { return t == Timing{} }

// ErrTimingMismatch is a Raft connection refused, by either end, because
// the two members' timings differ.
var ErrTimingMismatch = errors.New("timing mismatch between Raft members")

// TimingError is ErrTimingMismatch with the two timings.
type TimingError struct {
	Peer       string // the peer's Raft address
	PeerTiming Timing
	Self       Timing
}

func (e *TimingError) Error() string {
	switch {
	case e.PeerTiming.IsZero():
		return fmt.Sprintf("Raft connection refused: peer %s states no Raft timing, this member runs --raft-rtt %v", e.Peer, e.Self.RTT)
	case e.PeerTiming.ElectionTicks == e.Self.ElectionTicks:
		return fmt.Sprintf("Raft connection refused: peer %s runs --raft-rtt %v, this member %v; every member must use the same value", e.Peer, e.PeerTiming.RTT, e.Self.RTT)
	}
	return fmt.Sprintf("Raft connection refused: peer %s runs --raft-rtt %v with elections after %d ticks, this member %v and %d ticks; every member must use the same values",
		e.Peer, e.PeerTiming.RTT, e.PeerTiming.ElectionTicks, e.Self.RTT, e.Self.ElectionTicks)
}

func (e *TimingError) Unwrap() error { return ErrTimingMismatch }

// hello is what a member states when a connection opens: its timing and
// its Raft address (for the other end's logs: an accepted connection's
// remote port is an ephemeral one).
type hello struct {
	Timing
	Addr string
}

// On the wire a hello is its length (2 bytes, of the rest), the tick in
// nanoseconds (8), the election ticks (4), the address's length (2) and
// the address; a reader ignores anything after it (later fields).
const (
	helloFixed = 8 + 4 + 2
	maxHello   = 1024
)

// append appends h's wire form to b.
func (h hello) append(b []byte) []byte {
	addr := h.Addr[:min(len(h.Addr), maxHello-helloFixed)]
	b = binary.BigEndian.AppendUint16(b, uint16(helloFixed+len(addr)))
	b = binary.BigEndian.AppendUint64(b, uint64(h.RTT))
	b = binary.BigEndian.AppendUint32(b, uint32(h.ElectionTicks))
	b = binary.BigEndian.AppendUint16(b, uint16(len(addr)))
	return append(b, addr...)
}

func readHello(r io.Reader) (hello, error) {
	var n [2]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return hello{}, err
	}
	size := int(binary.BigEndian.Uint16(n[:]))
	if size < helloFixed || size > maxHello {
		return hello{}, fmt.Errorf("hello of %d bytes (%d to %d)", size, helloFixed, maxHello)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return hello{}, err
	}
	rtt, ticks := binary.BigEndian.Uint64(b), binary.BigEndian.Uint32(b[8:])
	addrLen := int(binary.BigEndian.Uint16(b[12:]))
	if rtt > math.MaxInt64 || ticks > math.MaxInt32 || addrLen > size-helloFixed {
		return hello{}, errors.New("malformed hello")
	}
	return hello{Timing: Timing{RTT: time.Duration(rtt), ElectionTicks: int(ticks)}, Addr: string(b[helloFixed : helloFixed+addrLen])}, nil
}

// answerHello reads the hello of a preface and answers it, refusing the
// connection when the timings differ.
func (t *transport) answerHello(conn net.Conn, r *bufio.Reader) error {
	peer, err := readHello(r)
	if err != nil {
		return fmt.Errorf("%w: hello: %w", errPreface, err)
	}
	if peer.Addr == "" {
		peer.Addr = conn.RemoteAddr().String()
	}
	refused := t.check(peer, false)
	answer := prefaceAck
	if refused != nil {
		answer = prefaceRefused
	}
	if err := writeAll(conn, t.hello.append([]byte{answer})); err != nil {
		return err
	}
	return refused
}

// check compares the timing a peer stated with this member's; byPeer: the
// peer refused the connection already. It reports the outcome to
// OnTiming, logs a refusal, and returns it as a *TimingError.
func (t *transport) check(peer hello, byPeer bool) error {
	if t.hello.Timing.IsZero() && !byPeer {
		return nil
	}
	refused := byPeer || peer.Timing != t.hello.Timing && !t.anyTiming
	if t.onTiming != nil {
		t.onTiming(peer.Addr, peer.Timing, refused)
	}
	if !refused {
		return nil
	}
	err := &TimingError{Peer: peer.Addr, PeerTiming: peer.Timing, Self: t.hello.Timing}
	if t.warnPeer("timing " + peer.Addr) {
		by := "this member"
		if byPeer {
			by = "the peer"
		}
		t.log.Error(err.Error(), "peer", peer.Addr, "refused_by", by)
	}
	return err
}

// warnUnchecked warns, now and then, that peer's timing cannot be checked.
func (t *transport) warnUnchecked(peer, why string) {
	if t.hello.Timing.IsZero() {
		return
	}
	key := peer
	if host, _, err := net.SplitHostPort(peer); err == nil && peer != "" {
		key = host // an accepted connection's port is ephemeral
	}
	if t.warnPeer("unchecked " + key) {
		t.log.Warn("cannot check a peer's --raft-rtt: every member must use the same value, so keep it unchanged until every member runs this version",
			"peer", peer, "why", why, "this_member_rtt", t.hello.RTT)
	}
}

// warnEvery paces the warnings about one peer: dragonboat redials a
// failed peer every few seconds.
const warnEvery = 30 * time.Second

// warnPeer reports whether a warning keyed key is due, and if so records
// that it is given now.
func (t *transport) warnPeer(key string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	if last, ok := t.warned[key]; ok && now.Sub(last) < warnEvery {
		return false
	}
	t.warned[key] = now
	return true
}
