package raftnet

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"time"

	pb "github.com/lni/dragonboat/v4/raftpb"
)

// dragonboat v4's own TCP framing, spoken with members that run an older
// kahuna (dragonboat's transport), so a cluster can be upgraded one member
// at a time: such a member gets this framing from us (it closes a
// connection that opens with our preface, and dial falls back), and we
// read it from such a member (serve tells the two apart by the first two
// bytes). Each message is magic (2 bytes), an 18-byte header (method,
// payload size, the header's CRC-32 and the payload's CRC-32, IEEE, 0 under
// TLS) and the payload; [0 0] in place of the magic ends a snapshot stream
// and is acknowledged with [0 0].
var (
	legacyMagic  = [2]byte{0xAE, 0x7D}
	legacyPoison = [2]byte{0, 0}
)

const (
	legacyHeader   = 18
	legacyMessages = uint16(100)
	legacyChunks   = uint16(200)
)

// legacyFrame marshals one message of the given method behind magic and
// header into *buf (grown as needed), for one write.
func legacyFrame(buf *[]byte, method uint16, size int, encrypted bool, marshal func([]byte) (int, error)) ([]byte, error) {
	const pre = len(legacyMagic) + legacyHeader
	b, err := marshalBehind(buf, pre, size, marshal)
	if err != nil {
		return nil, err
	}
	copy(b, legacyMagic[:])
	h := b[len(legacyMagic):pre]
	binary.BigEndian.PutUint16(h, method)
	binary.BigEndian.PutUint64(h[2:], uint64(len(b)-pre))
	binary.BigEndian.PutUint32(h[10:], 0)
	var crc uint32
	if !encrypted {
		crc = crc32.ChecksumIEEE(b[pre:])
	}
	binary.BigEndian.PutUint32(h[14:], crc)
	binary.BigEndian.PutUint32(h[10:], crc32.ChecksumIEEE(h))
	return b, nil
}

// serveLegacy reads dragonboat-framed messages after the first magic,
// which the caller has read.
func (t *transport) serveLegacy(conn net.Conn, r *bufio.Reader, encrypted bool) error {
	var buf []byte
	for {
		method, body, err := readLegacy(r, &buf, encrypted)
		if err != nil {
			return err
		}
		switch method {
		case legacyMessages:
			var b pb.MessageBatch
			if err := b.Unmarshal(body); err != nil {
				return fmt.Errorf("message batch: %w", err)
			}
			t.onMessages(b)
		case legacyChunks:
			var c pb.Chunk
			if err := c.Unmarshal(body); err != nil {
				return fmt.Errorf("snapshot chunk: %w", err)
			}
			if !t.onChunk(c) {
				return fmt.Errorf("snapshot chunk %d of shard %d refused", c.ChunkId, c.ShardID)
			}
		}
		var m [2]byte
		if _, err := io.ReadFull(r, m[:]); err != nil {
			return err
		}
		switch m {
		case legacyMagic:
		case legacyPoison:
			return writeAll(conn, legacyPoison[:])
		default:
			return fmt.Errorf("bad magic %x", m)
		}
	}
}

// readLegacy reads one header and payload (the magic already read).
func readLegacy(r *bufio.Reader, buf *[]byte, encrypted bool) (uint16, []byte, error) {
	var h [legacyHeader]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	sum := binary.BigEndian.Uint32(h[10:])
	binary.BigEndian.PutUint32(h[10:], 0)
	if crc32.ChecksumIEEE(h[:]) != sum {
		return 0, nil, errors.New("header checksum mismatch")
	}
	method := binary.BigEndian.Uint16(h[:])
	if method != legacyMessages && method != legacyChunks {
		return 0, nil, fmt.Errorf("unknown method %d", method)
	}
	n := binary.BigEndian.Uint64(h[2:])
	if n == 0 || n > maxFrame {
		return 0, nil, fmt.Errorf("payload of %d bytes (limit %d)", n, maxFrame)
	}
	if cap(*buf) < int(n) {
		*buf = make([]byte, n)
	}
	body := (*buf)[:n]
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, nil, err
	}
	if !encrypted && crc32.ChecksumIEEE(body) != binary.BigEndian.Uint32(h[14:]) {
		return 0, nil, errors.New("payload checksum mismatch")
	}
	return method, body, nil
}

// legacyEnd ends a dragonboat-framed snapshot stream and waits for its
// acknowledgement, so the receiver has handled every chunk.
func legacyEnd(conn net.Conn) {
	if err := writeAll(conn, legacyPoison[:]); err != nil {
		return
	}
	if err := conn.SetReadDeadline(time.Now().Add(closeAckTimeout)); err != nil {
		return
	}
	var ack [2]byte
	io.ReadFull(conn, ack[:])
}
