package durability

import (
	"encoding/binary"
	"errors"
)

// Wire format of one Raft entry (a "batch"):
//
//	batch  = version:byte count:uint16be record{count}   (count >= 1)
//	record = uvarint(len) resource  value
//	value  = flags:byte varint(Token) uvarint(Revision) varint(ExpiresMs)
//	         varint(LastModifiedMs) uvarint(len) owner
//
// A value is also exactly what badger stores under the record's key, so the
// state machine writes a slice of the entry without re-encoding, and the
// advance-only guard reads Token and Revision from the first bytes.
// Varints must be minimal, so every decodable input has one encoding and
// encode(decode(x)) == x.

const (
	batchVersion byte = 1
	// batchHeaderLen: version and a fixed-width count, so the writer can
	// fill the count in place when it closes a batch.
	batchHeaderLen = 3
	// formatMaxRecords is the most records one batch can hold.
	formatMaxRecords      = 1<<16 - 1
	flagLocked       byte = 1 << 0
	// maxRecordBytes caps one encoded record. The design limits resource and
	// owner to about 1 KiB each; this keeps a batch far below badger's and
	// dragonboat's size limits whatever a caller sends.
	maxRecordBytes = 64 << 10
)

var errCorrupt = errors.New("durability: corrupt encoding")

// appendRecord appends rec in record form.
func appendRecord(b []byte, rec *Record) []byte {
	b = binary.AppendUvarint(b, uint64(len(rec.Resource)))
	b = append(b, rec.Resource...)
	return appendValue(b, rec)
}

// appendValue appends the stored form of rec (everything but the resource).
func appendValue(b []byte, rec *Record) []byte {
	var flags byte
	if rec.Locked {
		flags |= flagLocked
	}
	b = append(b, flags)
	b = binary.AppendVarint(b, rec.Token)
	b = binary.AppendUvarint(b, rec.Revision)
	b = binary.AppendVarint(b, rec.ExpiresMs)
	b = binary.AppendVarint(b, rec.LastModifiedMs)
	b = binary.AppendUvarint(b, uint64(len(rec.Owner)))
	return append(b, rec.Owner...)
}

// recordSize is len(appendRecord(nil, rec)) without encoding.
func recordSize(rec *Record) int {
	return uvarintLen(uint64(len(rec.Resource))) + len(rec.Resource) + 1 +
		varintLen(rec.Token) + uvarintLen(rec.Revision) + varintLen(rec.ExpiresMs) +
		varintLen(rec.LastModifiedMs) + uvarintLen(uint64(len(rec.Owner))) + len(rec.Owner)
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

func varintLen(x int64) int {
	ux := uint64(x) << 1
	if x < 0 {
		ux = ^ux
	}
	return uvarintLen(ux)
}

// encodeBatch appends a batch holding recs (1 to formatMaxRecords) to dst.
func encodeBatch(dst []byte, recs []Record) []byte {
	dst = append(dst, batchVersion)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(recs)))
	for i := range recs {
		dst = appendRecord(dst, &recs[i])
	}
	return dst
}

// decodeBatch appends the records of batch b to dst. Owners alias b. It
// never panics and rejects anything encodeBatch cannot produce.
func decodeBatch(dst []Record, b []byte) ([]Record, error) {
	body, n, err := batchBody(b)
	if err != nil {
		return dst, err
	}
	for range n {
		var rec Record
		var res []byte
		res, _, body, err = nextRecord(body, &rec)
		if err != nil {
			return dst, err
		}
		rec.Resource = string(res)
		dst = append(dst, rec)
	}
	if len(body) != 0 {
		return dst, errCorrupt
	}
	return dst, nil
}

// batchBody checks the header and returns the records part and the record
// count (at least 1).
func batchBody(b []byte) ([]byte, int, error) {
	if len(b) < batchHeaderLen || b[0] != batchVersion {
		return nil, 0, errCorrupt
	}
	n := int(binary.BigEndian.Uint16(b[1:batchHeaderLen]))
	if n == 0 {
		return nil, 0, errCorrupt
	}
	return b[batchHeaderLen:], n, nil
}

// setBatchCount fills in the count of a batch built with appendRecord.
func setBatchCount(b []byte, n int) {
	binary.BigEndian.PutUint16(b[1:batchHeaderLen], uint16(n))
}

// nextRecord splits the first record off b: its resource and value bytes
// (both aliasing b), the rest, and the decoded fields in rec (Resource is
// left alone).
func nextRecord(b []byte, rec *Record) (resource, value, rest []byte, err error) {
	d := decoder{b: b}
	resource = d.bytes(d.uvarint())
	if d.err != nil {
		return nil, nil, nil, d.err
	}
	start := len(b) - len(d.b)
	d.value(rec)
	if d.err != nil {
		return nil, nil, nil, d.err
	}
	end := len(b) - len(d.b)
	return resource, b[start:end], d.b, nil
}

// decodeValue decodes a stored value; Owner aliases v.
func decodeValue(v []byte, rec *Record) error {
	d := decoder{b: v}
	d.value(rec)
	if d.err == nil && len(d.b) != 0 {
		d.err = errCorrupt
	}
	return d.err
}

// valueOrder reads the (Token, Revision) pair at the start of a value.
func valueOrder(v []byte) (token int64, revision uint64, err error) {
	d := decoder{b: v}
	if f := d.byte(); f&^flagLocked != 0 {
		d.fail()
	}
	token = d.varint()
	revision = d.uvarint()
	return token, revision, d.err
}

// advances reports whether (token, revision) is strictly after (oldToken,
// oldRevision) in lexicographic order.
func advances(token int64, revision uint64, oldToken int64, oldRevision uint64) bool {
	return token > oldToken || (token == oldToken && revision > oldRevision)
}

// decoder reads canonical fields; after the first error every read returns
// zero and err stays set.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail() {
	d.err = errCorrupt
	d.b = nil
}

func (d *decoder) byte() byte {
	if len(d.b) == 0 {
		d.fail()
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) uvarint() uint64 {
	x, n := binary.Uvarint(d.b)
	// n <= 0: truncated or overflow; a trailing 0x00 byte: not minimal.
	if n <= 0 || (n > 1 && d.b[n-1] == 0) {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return x
}

func (d *decoder) varint() int64 {
	ux := d.uvarint()
	x := int64(ux >> 1)
	if ux&1 != 0 {
		x = ^x
	}
	return x
}

func (d *decoder) bytes(n uint64) []byte {
	if n > uint64(len(d.b)) {
		d.fail()
		return nil
	}
	s := d.b[:n:n]
	d.b = d.b[n:]
	return s
}

func (d *decoder) value(rec *Record) {
	flags := d.byte()
	if flags&^flagLocked != 0 {
		d.fail()
	}
	rec.Locked = flags&flagLocked != 0
	rec.Token = d.varint()
	rec.Revision = d.uvarint()
	rec.ExpiresMs = d.varint()
	rec.LastModifiedMs = d.varint()
	rec.Owner = d.bytes(d.uvarint())
	if len(rec.Owner) == 0 {
		rec.Owner = nil
	}
}
