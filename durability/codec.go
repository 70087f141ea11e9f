package durability

import (
	"encoding/binary"
	"errors"
	"time"
)

// Wire format of one Raft entry. Its first byte is its kind:
//
//	batch  = 0x02 count:uint16be uvarint(term) uvarint(replica) record{count}
//	record = uvarint(len) resource uvarint(base) value
//	epoch  = 0x03 uvarint(term) uvarint(replica)
//	reach  = 0x04 uvarint(term) uvarint(replica) varint(reach)
//	grace  = 0x05 uvarint(term) uvarint(replica) varint(ttl ms) mode:byte
//	handed = 0x06 uvarint(term) uvarint(replica) leases
//	group  = 0x07 count:uint16be uvarint(term) uvarint(replica) record{count}
//	leases = uvarint(count) (uvarint(len) resource uvarint(len) owner
//	         varint(token) uvarint(revision) varint(left ms)){count}
//	legacy = 0x01 count:uint16be (uvarint(len) resource value){count}
//
//	value  = flags:byte varint(Token) uvarint(Revision) varint(ExpiresMs)
//	         varint(LastModifiedMs) uvarint(len) owner [slots]
//	stored = flags|flagIndexed:byte uvarint(Index) varint(Token) … owner [slots]
//	flags  = flagLocked | flagIndexed (stored only) | flagRemove | flagSlots
//	         | flagRW | flagExclusive | flagLimit | flagRenewed
//	slots  = uvarint(n) (uvarint(len) owner varint(expires ms) varint(token)){n}
//	         [uvarint(limit), with flagLimit]
//
// A batch carries the epoch (leader term and replica) it was decided in,
// and each record the Index of the stored record it was decided from
// (base); the state machine applies a record only when both still hold
// (statemachine.go). An epoch entry is a new leader's marker. A reach entry
// raises the partition's ephemeral token reach (Raft.RaiseReach), a grace
// entry its ephemeral TTL bound (Raft.RaiseEphemeralTTL), each fenced by
// its epoch like a batch. A group is a batch applied all or nothing: if
// the fence refuses one of its records, none is applied (ProposeGroup).
// A handed entry lists the live ephemeral leases
// of a leader that stopped deciding for the partition, for the next one
// to keep (Raft.HandOver), fenced the same way. Legacy
// batches were written before the fence and are only replayed from old
// logs, with the advance-only guard alone.
//
// flagRemove marks a record that deletes the stored one (Record.Remove).
// Stored values never carry it, since applying it deletes the key, but
// both forms decode it so that every flag combination round-trips.
// flagSlots marks a record of several holders, whose slots follow the
// owner (which is empty): a semaphore's, n its limit (at least 1), or with
// flagRW a read/write lock's, n its holders (any number), with
// flagExclusive when the one holder is its writer. A semaphore shrunk below
// its slot count (whose higher slots are kept: their generations) has
// flagLimit, and its limit, at least 1 and below n, after the slots.
//
// What badger stores under a record's key is its value with the Raft index
// of the entry that wrote it (flagIndexed; records stored before the fence
// have none, which reads as Index 0). Varints must be minimal, so every
// decodable input has one encoding and encode(decode(x)) == x.

const (
	kindLegacyBatch byte = 1
	kindBatch       byte = 2
	kindEpoch       byte = 3
	kindReach       byte = 4
	kindGrace       byte = 5
	kindHandover    byte = 6
	kindGroup       byte = 7

	// countOffset is where a batch's fixed-width count sits, so the writer
	// can fill it in place when it closes a batch.
	countOffset = 1
	countLen    = 2
	// formatMaxRecords is the most records one batch can hold.
	formatMaxRecords      = 1<<16 - 1
	flagLocked       byte = 1 << 0
	flagIndexed      byte = 1 << 1 // stored form only: a Raft index follows the flags
	flagRemove       byte = 1 << 2 // delete the stored record (Record.Remove)
	flagSlots        byte = 1 << 3 // a semaphore's slots follow (Record.Limit)
	flagRW           byte = 1 << 4 // with flagSlots: a read/write lock's holders (Record.RW)
	flagExclusive    byte = 1 << 5 // with flagRW: its holder is the writer
	flagLimit        byte = 1 << 6 // with flagSlots, not flagRW: a limit below the slot count follows the slots
	flagRenewed      byte = 1 << 7 // the holder's renewals may be kept in the leader's memory (Record.Renewed)
	// maxRecordBytes caps one encoded record. The design limits resource and
	// owner to about 1 KiB each; this keeps a batch far below badger's and
	// dragonboat's size limits whatever a caller sends.
	maxRecordBytes = 64 << 10
)

var errCorrupt = errors.New("durability: corrupt encoding")

// Epoch is a leader's reign over a partition: its Raft term and replica ID.
// Only records decided in the epoch a state machine last accepted a marker
// for are applied.
type Epoch struct {
	Term    uint64
	Replica uint64
}

// header is the decoded head of an entry.
type header struct {
	kind  byte
	epoch Epoch // batch, epoch and reach entries
	count int   // batch entries: at least 1
	reach int64 // reach entries
	ttlMs int64 // grace entries
	exact bool  // grace entries: set the reign's bound to ttlMs (else raise it)
}

// special reports whether an entry of this kind carries no records: a
// marker, reach, grace or hand-over entry.
func (h header) special() bool {
	return h.kind == kindEpoch || h.kind == kindReach || h.kind == kindGrace || h.kind == kindHandover
}

// appendBatchHeader starts a batch (kindBatch or kindGroup) of epoch e
// with a zero count.
func appendBatchHeader(b []byte, kind byte, e Epoch) []byte {
	b = append(b, kind, 0, 0)
	b = binary.AppendUvarint(b, e.Term)
	return binary.AppendUvarint(b, e.Replica)
}

// appendEpoch appends an epoch marker entry.
func appendEpoch(b []byte, e Epoch) []byte {
	b = append(b, kindEpoch)
	b = binary.AppendUvarint(b, e.Term)
	return binary.AppendUvarint(b, e.Replica)
}

// appendReach appends a reach entry: raise the reach to at least reach,
// decided in epoch e.
func appendReach(b []byte, e Epoch, reach int64) []byte {
	b = append(b, kindReach)
	b = binary.AppendUvarint(b, e.Term)
	b = binary.AppendUvarint(b, e.Replica)
	return binary.AppendVarint(b, reach)
}

// Modes of a grace entry.
const (
	graceRaise byte = 0 // raise the reign's TTL bound, clear the carried grace
	graceExact byte = 1 // set the reign's bound (its leader stopped serving)
)

// appendGrace appends a grace entry of mode for ttlMs, decided in epoch e.
func appendGrace(b []byte, e Epoch, ttlMs int64, mode byte) []byte {
	b = append(b, kindGrace)
	b = binary.AppendUvarint(b, e.Term)
	b = binary.AppendUvarint(b, e.Replica)
	b = binary.AppendVarint(b, ttlMs)
	return append(b, mode)
}

// HandedLease is a live ephemeral lease handed from a leader that stopped
// deciding for its partition to the next one (Raft.HandOver).
type HandedLease struct {
	Resource string
	Owner    []byte
	Token    int64
	Revision uint64
	// Left is how long the lease still ran when it was handed over, in
	// whole milliseconds (rounded up): the next leader keeps it that long
	// from when it takes it.
	Left time.Duration
}

// appendHandover appends a hand-over entry decided in epoch e, whose
// leases part (appendLeases) is leases.
func appendHandover(b []byte, e Epoch, leases []byte) []byte {
	b = append(b, kindHandover)
	b = binary.AppendUvarint(b, e.Term)
	b = binary.AppendUvarint(b, e.Replica)
	return append(b, leases...)
}

// appendLeases appends the leases part of a hand-over entry.
func appendLeases(b []byte, leases []HandedLease) []byte {
	b = binary.AppendUvarint(b, uint64(len(leases)))
	for i := range leases {
		l := &leases[i]
		b = binary.AppendUvarint(b, uint64(len(l.Resource)))
		b = append(b, l.Resource...)
		b = binary.AppendUvarint(b, uint64(len(l.Owner)))
		b = append(b, l.Owner...)
		b = binary.AppendVarint(b, l.Token)
		b = binary.AppendUvarint(b, l.Revision)
		b = binary.AppendVarint(b, leftMs(l.Left))
	}
	return b
}

// leftMs is d in whole milliseconds, rounded up: a lease handed over never
// ends earlier than it would have.
func leftMs(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }

// maxLeftMs is the most milliseconds a time.Duration holds.
const maxLeftMs = int64(1<<63-1) / int64(time.Millisecond)

// decodeLeases decodes the leases part of a hand-over entry; the owners
// are copies. It rejects empty names or owners, negative tokens or times,
// and trailing bytes.
func decodeLeases(b []byte) ([]HandedLease, error) {
	d := decoder{b: b}
	n := d.uvarint()
	if n > uint64(len(b)) { // each lease takes several bytes
		return nil, errCorrupt
	}
	leases := make([]HandedLease, 0, n)
	for range n {
		res := d.bytes(d.uvarint())
		owner := d.bytes(d.uvarint())
		l := HandedLease{Resource: string(res), Owner: append([]byte(nil), owner...), Token: d.varint(), Revision: d.uvarint()}
		ms := d.varint()
		if d.err != nil || len(res) == 0 || len(owner) == 0 || l.Token < 0 || ms < 0 || ms > maxLeftMs {
			return nil, errCorrupt
		}
		l.Left = time.Duration(ms) * time.Millisecond
		leases = append(leases, l)
	}
	if d.err != nil || len(d.b) != 0 {
		return nil, errCorrupt
	}
	return leases, nil
}

// appendRecord appends rec in a batch's record form.
func appendRecord(b []byte, rec *Record) []byte {
	b = binary.AppendUvarint(b, uint64(len(rec.Resource)))
	b = append(b, rec.Resource...)
	b = binary.AppendUvarint(b, rec.Base)
	return appendValue(b, rec)
}

// appendValue appends the command form of rec's value (no index).
func appendValue(b []byte, rec *Record) []byte {
	var flags byte
	if rec.Locked {
		flags |= flagLocked
	}
	if rec.Remove {
		flags |= flagRemove
	}
	if rec.Limit > 0 || rec.RW {
		flags |= flagSlots
	}
	if rec.RW {
		flags |= flagRW
	}
	if rec.RW && rec.Exclusive {
		flags |= flagExclusive
	}
	if shrunk(rec) {
		flags |= flagLimit
	}
	if rec.Renewed {
		flags |= flagRenewed
	}
	b = append(b, flags)
	b = binary.AppendVarint(b, rec.Token)
	b = binary.AppendUvarint(b, rec.Revision)
	b = binary.AppendVarint(b, rec.ExpiresMs)
	b = binary.AppendVarint(b, rec.LastModifiedMs)
	b = binary.AppendUvarint(b, uint64(len(rec.Owner)))
	b = append(b, rec.Owner...)
	if n := slotCount(rec); n > 0 || rec.RW {
		b = binary.AppendUvarint(b, uint64(n))
		for i := range n {
			var s Slot
			if i < len(rec.Slots) {
				s = rec.Slots[i]
			}
			b = binary.AppendUvarint(b, uint64(len(s.Owner)))
			b = append(b, s.Owner...)
			b = binary.AppendVarint(b, s.ExpiresMs)
			b = binary.AppendVarint(b, s.Token)
		}
	}
	if shrunk(rec) {
		b = binary.AppendUvarint(b, uint64(rec.Limit))
	}
	return b
}

// shrunk reports whether rec is a semaphore with more slots than its limit
// (flagLimit).
func shrunk(rec *Record) bool { return !rec.RW && rec.Limit > 0 && len(rec.Slots) > rec.Limit }

// appendStored appends the stored form of a command-form value written by
// the entry at index.
func appendStored(b, value []byte, index uint64) []byte {
	b = append(b, value[0]|flagIndexed)
	b = binary.AppendUvarint(b, index)
	return append(b, value[1:]...)
}

// recordSize is len(appendRecord(nil, rec)) without encoding.
func recordSize(rec *Record) int {
	return uvarintLen(uint64(len(rec.Resource))) + len(rec.Resource) + uvarintLen(rec.Base) + 1 +
		varintLen(rec.Token) + uvarintLen(rec.Revision) + varintLen(rec.ExpiresMs) +
		varintLen(rec.LastModifiedMs) + uvarintLen(uint64(len(rec.Owner))) + len(rec.Owner) + slotsSize(rec)
}

// slotCount is how many slots rec's value carries: a semaphore's limit,
// a read/write lock's holders, none for a lock.
func slotCount(rec *Record) int {
	if rec.RW || shrunk(rec) {
		return len(rec.Slots)
	}
	return max(rec.Limit, 0)
}

func slotsSize(rec *Record) int {
	count := slotCount(rec)
	if count == 0 && !rec.RW {
		return 0
	}
	n := uvarintLen(uint64(count))
	for i := range count {
		var s Slot
		if i < len(rec.Slots) {
			s = rec.Slots[i]
		}
		n += uvarintLen(uint64(len(s.Owner))) + len(s.Owner) + varintLen(s.ExpiresMs) + varintLen(s.Token)
	}
	if shrunk(rec) {
		n += uvarintLen(uint64(rec.Limit))
	}
	return n
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

// encodeBatch appends a batch of epoch e holding recs (1 to
// formatMaxRecords) to dst.
func encodeBatch(dst []byte, e Epoch, recs []Record) []byte {
	start := len(dst)
	dst = appendBatchHeader(dst, kindBatch, e)
	for i := range recs {
		dst = appendRecord(dst, &recs[i])
	}
	setBatchCount(dst[start:], len(recs))
	return dst
}

// decodeBatch decodes a batch entry (fenced or legacy) into its epoch and
// records, appended to dst. Owners alias b. It never panics and rejects
// anything encodeBatch (or the legacy writer) cannot produce.
func decodeBatch(dst []Record, b []byte) (header, []Record, error) {
	h, body, err := parseHeader(b)
	if err != nil {
		return h, dst, err
	}
	if h.special() {
		return h, dst, errCorrupt
	}
	for range h.count {
		var rec Record
		var res []byte
		res, _, body, err = nextRecord(body, h.kind, &rec)
		if err != nil {
			return h, dst, err
		}
		rec.Resource = string(res)
		dst = append(dst, rec)
	}
	if len(body) != 0 {
		return h, dst, errCorrupt
	}
	return h, dst, nil
}

// parseHeader decodes the head of an entry and returns the rest: the
// records of a batch, nothing of an epoch marker.
func parseHeader(b []byte) (header, []byte, error) {
	if len(b) == 0 {
		return header{}, nil, errCorrupt
	}
	h := header{kind: b[0]}
	d := decoder{b: b[1:]}
	switch h.kind {
	case kindBatch, kindGroup, kindLegacyBatch:
		if len(d.b) < countLen {
			return h, nil, errCorrupt
		}
		h.count = int(binary.BigEndian.Uint16(d.b))
		d.b = d.b[countLen:]
		if h.count == 0 {
			return h, nil, errCorrupt
		}
		if h.kind != kindLegacyBatch {
			h.epoch = Epoch{Term: d.uvarint(), Replica: d.uvarint()}
		}
	case kindEpoch:
		h.epoch = Epoch{Term: d.uvarint(), Replica: d.uvarint()}
		if d.err == nil && len(d.b) != 0 {
			d.fail()
		}
	case kindReach:
		h.epoch = Epoch{Term: d.uvarint(), Replica: d.uvarint()}
		h.reach = d.varint()
		if d.err == nil && (len(d.b) != 0 || h.reach < 0) {
			d.fail()
		}
	case kindGrace:
		h.epoch = Epoch{Term: d.uvarint(), Replica: d.uvarint()}
		h.ttlMs = d.varint()
		mode := d.byte()
		h.exact = mode == graceExact
		if d.err == nil && (len(d.b) != 0 || h.ttlMs < 0 || mode > graceExact) {
			d.fail()
		}
	case kindHandover:
		h.epoch = Epoch{Term: d.uvarint(), Replica: d.uvarint()}
		if d.err == nil {
			if _, err := decodeLeases(d.b); err != nil {
				d.fail()
			}
		}
	default:
		return h, nil, errCorrupt
	}
	if d.err != nil {
		return h, nil, d.err
	}
	return h, d.b, nil
}

// setBatchCount fills in the count of a batch built with appendBatchHeader
// and appendRecord.
func setBatchCount(b []byte, n int) {
	binary.BigEndian.PutUint16(b[countOffset:countOffset+countLen], uint16(n))
}

// nextRecord splits the first record of a batch of the given kind off b:
// its resource and command-form value bytes (both aliasing b), the rest,
// and the decoded fields in rec (Resource is left alone).
func nextRecord(b []byte, kind byte, rec *Record) (resource, value, rest []byte, err error) {
	d := decoder{b: b}
	resource = d.bytes(d.uvarint())
	rec.Base = 0
	if kind != kindLegacyBatch {
		rec.Base = d.uvarint()
	}
	if d.err != nil {
		return nil, nil, nil, d.err
	}
	start := len(b) - len(d.b)
	d.value(rec, false)
	if d.err != nil {
		return nil, nil, nil, d.err
	}
	end := len(b) - len(d.b)
	return resource, b[start:end], d.b, nil
}

// decodeStored decodes a stored value; Owner aliases v.
func decodeStored(v []byte, rec *Record) error {
	d := decoder{b: v}
	d.value(rec, true)
	if d.err == nil && len(d.b) != 0 {
		d.err = errCorrupt
	}
	return d.err
}

// storedOrder reads the index and (Token, Revision) at the start of a
// stored value.
func storedOrder(v []byte) (order, error) {
	d := decoder{b: v}
	var o order
	f := d.byte()
	if f&^(flagLocked|flagIndexed|flagRemove|flagSlots|flagRW|flagExclusive|flagLimit|flagRenewed) != 0 {
		d.fail()
	}
	if f&flagIndexed != 0 {
		o.index = d.uvarint()
	}
	o.token = d.varint()
	o.revision = d.uvarint()
	return o, d.err
}

// advances reports whether (token, revision) is strictly after (oldToken,
// oldRevision) in lexicographic order: the guard of legacy batches.
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

// value decodes a value: the stored form (which may carry an index) or the
// command form (which never does).
func (d *decoder) value(rec *Record, stored bool) {
	flags := d.byte()
	known := flagLocked | flagRemove | flagSlots | flagRW | flagExclusive | flagLimit | flagRenewed
	if stored {
		known |= flagIndexed
	}
	if flags&^known != 0 {
		d.fail()
	}
	rec.Locked = flags&flagLocked != 0
	rec.Remove = flags&flagRemove != 0
	rec.Renewed = flags&flagRenewed != 0
	rec.Index = 0
	if flags&flagIndexed != 0 {
		rec.Index = d.uvarint()
	}
	rec.Token = d.varint()
	rec.Revision = d.uvarint()
	rec.ExpiresMs = d.varint()
	rec.LastModifiedMs = d.varint()
	rec.Owner = d.bytes(d.uvarint())
	if len(rec.Owner) == 0 {
		rec.Owner = nil
	}
	rec.Limit, rec.Slots = 0, nil
	rec.RW, rec.Exclusive = flags&flagRW != 0, flags&flagExclusive != 0
	if flags&flagSlots == 0 {
		if rec.RW || rec.Exclusive || flags&flagLimit != 0 {
			d.fail()
		}
		return
	}
	if rec.RW && flags&flagLimit != 0 {
		d.fail()
		return
	}
	if rec.Exclusive && !rec.RW {
		d.fail()
		return
	}
	n := d.uvarint()
	// Each slot takes at least 3 bytes: a count the input cannot hold is
	// refused before anything is allocated for it.
	if n == 0 && !rec.RW || n > uint64(len(d.b)/3) || rec.Owner != nil {
		d.fail()
		return
	}
	if !rec.RW {
		rec.Limit = int(n)
	}
	if n == 0 {
		return
	}
	rec.Slots = make([]Slot, n)
	for i := range rec.Slots {
		s := &rec.Slots[i]
		s.Owner = d.bytes(d.uvarint())
		if len(s.Owner) == 0 {
			s.Owner = nil
		}
		s.ExpiresMs = d.varint()
		s.Token = d.varint()
	}
	if flags&flagLimit != 0 {
		// Only a limit below the slot count is written so (shrunk): any
		// other would encode differently.
		if limit := d.uvarint(); limit >= 1 && limit < n {
			rec.Limit = int(limit)
		} else {
			d.fail()
		}
	}
}
