package durability

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"reflect"
	"testing"
)

func sampleRecords() []Record {
	return []Record{
		{Resource: "tenant/a/x", Owner: []byte("owner-1"), ExpiresMs: 1_700_000_000_123, Token: 1, Revision: 1, Locked: true, LastModifiedMs: 1_700_000_000_000},
		{Resource: "tenant/a/renewed", Owner: []byte("owner-2"), ExpiresMs: 1_700_000_030_000, Token: 3, Revision: 2, Locked: true, LastModifiedMs: 1_700_000_000_000, Renewed: true},
		{Resource: "tenant/a/y", Token: 7, Revision: 42, LastModifiedMs: -1},
		{Resource: "", Owner: []byte{0, 0xff}, ExpiresMs: math.MinInt64, Token: math.MaxInt64, Revision: math.MaxUint64, Locked: true, LastModifiedMs: math.MaxInt64},
		{Resource: "ünïcødé/资源", Owner: bytes.Repeat([]byte{'o'}, 300), Token: -5, Revision: 0},
		{Resource: "tenant/a/gone", Token: 12, Revision: 3, LastModifiedMs: 9, Remove: true},
		{Resource: "tenant/a/held", Owner: []byte("o"), Token: 2, Revision: 1, Locked: true, Remove: true},
		{Resource: "semaphore:pool", ExpiresMs: 1_700_000_000_500, Token: 9, Revision: 4, Locked: true, LastModifiedMs: 1_700_000_000_000,
			Limit: 3, Slots: []Slot{{Owner: []byte("a"), ExpiresMs: 1_700_000_000_500, Token: 9}, {Token: 4, ExpiresMs: -3}, {}}},
		{Resource: "semaphore:idle", Token: 2, Revision: 9, Limit: 1, Slots: []Slot{{Token: 2}}},
		// Shrunk to 1 while its slot 2 is held: the three slots are kept.
		{Resource: "semaphore:shrunk", ExpiresMs: 80, Token: 6, Revision: 10, Locked: true,
			Limit: 1, Slots: []Slot{{Token: 3}, {Token: 1}, {Owner: []byte("late"), ExpiresMs: 80, Token: 6}}},
		{Resource: "rwlock:index", Token: 4, Revision: 7, Locked: true, ExpiresMs: 90, RW: true,
			Slots: []Slot{{Owner: []byte("r1"), ExpiresMs: 80, Token: 4}, {Owner: []byte("r2"), ExpiresMs: 90, Token: 4}}},
		{Resource: "rwlock:w", Token: 5, Revision: 8, Locked: true, ExpiresMs: 70, RW: true, Exclusive: true,
			Slots: []Slot{{Owner: []byte("w"), ExpiresMs: 70, Token: 5}}},
		{Resource: "rwlock:free", Token: 5, Revision: 9, RW: true, Exclusive: true},
	}
}

var codecEpoch = Epoch{Term: 300, Replica: 2}

func TestCodecRoundTrip(t *testing.T) {
	recs := sampleRecords()
	recs[1].Base, recs[2].Base, recs[4].Base = 77, math.MaxUint64, 5
	enc := encodeBatch(nil, codecEpoch, recs)
	want := len(appendBatchHeader(nil, kindBatch, codecEpoch))
	for i := range recs {
		want += recordSize(&recs[i])
	}
	if len(enc) != want {
		t.Fatalf("encoded %d bytes, recordSize predicts %d", len(enc), want)
	}
	h, got, err := decodeBatch(nil, enc)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if h.kind != kindBatch || h.epoch != codecEpoch || h.count != len(recs) {
		t.Fatalf("header %+v", h)
	}
	if !reflect.DeepEqual(got, recs) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, recs)
	}
	if again := encodeBatch(nil, h.epoch, got); !bytes.Equal(again, enc) {
		t.Fatalf("re-encoding differs")
	}
	// Each record's value, stored with an index, decodes alone and leads
	// with the index and (Token, Revision).
	_, body, _ := parseHeader(enc)
	for i := range recs {
		var rec Record
		res, val, rest, err := nextRecord(body, kindBatch, &rec)
		if err != nil || string(res) != recs[i].Resource || rec.Base != recs[i].Base {
			t.Fatalf("record %d: res %q base %d err %v", i, res, rec.Base, err)
		}
		st := appendStored(nil, val, uint64(1000+i))
		var v Record
		if err := decodeStored(st, &v); err != nil {
			t.Fatalf("record %d value: %v", i, err)
		}
		want := recs[i]
		want.Base, want.Index = 0, uint64(1000+i)
		v.Resource = want.Resource
		if !reflect.DeepEqual(v, want) {
			t.Fatalf("record %d value: got %+v", i, v)
		}
		o, err := storedOrder(st)
		if err != nil || o != (order{index: uint64(1000 + i), token: recs[i].Token, revision: recs[i].Revision}) {
			t.Fatalf("record %d order: %+v %v", i, o, err)
		}
		// A value stored before the fence has no index.
		var old Record
		if err := decodeStored(val, &old); err != nil || old.Index != 0 {
			t.Fatalf("record %d unindexed value: %+v %v", i, old, err)
		}
		body = rest
	}
	m := appendEpoch(nil, codecEpoch)
	if h, rest, err := parseHeader(m); err != nil || h.kind != kindEpoch || h.epoch != codecEpoch || len(rest) != 0 {
		t.Fatalf("epoch marker: %+v %x %v", h, rest, err)
	}
}

func TestDecodeBatchRejectsCorrupt(t *testing.T) {
	valid := encodeBatch(nil, Epoch{Term: 1, Replica: 1}, sampleRecords()[:2])
	h := []byte{kindBatch, 0, 1, 1, 1} // header of a one-record batch of epoch (1, 1)
	cases := map[string][]byte{
		"empty":            nil,
		"header only":      h,
		"zero count":       {kindBatch, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0},
		"count too high":   append([]byte{kindBatch, 0, 3}, valid[3:]...),
		"count too low":    append([]byte{kindBatch, 0, 1}, valid[3:]...),
		"unknown kind":     append([]byte{9}, valid[1:]...),
		"marker in batch":  append([]byte{kindEpoch}, valid[1:]...),
		"trailing garbage": append(bytes.Clone(valid), 0x05),
		"non-minimal len":  append(bytes.Clone(h), 0x80, 0x00, 0, 0, 0, 0, 0, 0, 0),
		"unknown flag":     append(bytes.Clone(h), 0, 0, 0x40, 0, 0, 0, 0, 0),
		"slots, no limit":  append(bytes.Clone(h), 0, 0, flagSlots, 0, 0, 0, 0, 0),
		"slots, limit 0":   append(bytes.Clone(h), 0, 0, flagSlots, 0, 0, 0, 0, 0, 0),
		"slots truncated":  append(bytes.Clone(h), 0, 0, flagSlots, 0, 0, 0, 0, 0, 2, 0, 0, 0),
		"slots and owner":  append(bytes.Clone(h), 0, 0, flagSlots, 0, 0, 0, 0, 1, 'o', 1, 0, 0, 0),
		"huge limit":       append(bytes.Clone(h), 0, 0, flagSlots, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f, 0, 0, 0),
		"rw, no slots":     append(bytes.Clone(h), 0, 0, flagRW, 0, 0, 0, 0, 0),
		"exclusive, no rw": append(bytes.Clone(h), 0, 0, flagSlots|flagExclusive, 0, 0, 0, 0, 0, 1, 0, 0, 0),
		"index in command": append(bytes.Clone(h), 0, 0, flagIndexed, 0, 0, 0, 0, 0, 0),
		"huge length":      append(bytes.Clone(h), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01),
		"varint overflow":  append(bytes.Clone(h), 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f),
		"owner too long":   append(bytes.Clone(h), 0, 0, 0, 0, 0, 0, 0, 5, 'a'),
	}
	for i := 1; i < len(valid); i++ {
		cases[fmt.Sprintf("truncated at %d", i)] = valid[:i]
	}
	for name, in := range cases {
		if _, recs, err := decodeBatch(nil, in); !errors.Is(err, errCorrupt) {
			t.Errorf("%s: decode(%x) = %v, %v; want errCorrupt", name, in, recs, err)
		}
		if _, _, _, _, err := scanEntry(in); err == nil && (len(in) == 0 || in[0] != kindEpoch) {
			t.Errorf("%s: scanEntry accepted %x", name, in)
		}
	}
	for name, in := range map[string][]byte{
		"marker truncated": {kindEpoch, 1},
		"marker trailing":  {kindEpoch, 1, 1, 0},
		"marker only kind": {kindEpoch},
	} {
		if _, _, err := parseHeader(in); !errors.Is(err, errCorrupt) {
			t.Errorf("%s: parseHeader(%x) = %v", name, in, err)
		}
	}
	if err := decodeStored([]byte{0, 0, 0, 0, 0, 0, 9}, &Record{}); !errors.Is(err, errCorrupt) {
		t.Errorf("value with trailing byte accepted: %v", err)
	}
	// Every bit of the flags byte has a meaning (flagRenewed is the last):
	// what is refused is a combination that means nothing.
	if err := decodeStored([]byte{flagSlots | flagRW | flagLimit, 0, 0, 0, 0, 0, 0}, &Record{}); !errors.Is(err, errCorrupt) {
		t.Errorf("a read/write lock with a limit accepted: %v", err)
	}
	var rec Record
	if err := decodeStored([]byte{flagLocked | flagRenewed, 0, 0, 0, 0, 0}, &rec); err != nil || !rec.Renewed || !rec.Locked {
		t.Errorf("a renewed lock's stored value: %+v %v", rec, err)
	}
}

func TestAdvances(t *testing.T) {
	for _, c := range []struct {
		tok    int64
		rev    uint64
		oldTok int64
		oldRev uint64
		want   bool
	}{
		{2, 1, 1, 9, true},
		{1, 2, 1, 1, true},
		{1, 1, 1, 1, false},
		{1, 0, 1, 1, false},
		{0, 99, 1, 1, false},
	} {
		if got := advances(c.tok, c.rev, c.oldTok, c.oldRev); got != c.want {
			t.Errorf("advances(%d,%d over %d,%d) = %v", c.tok, c.rev, c.oldTok, c.oldRev, got)
		}
	}
}

// FuzzDecodeBatch: decoding never panics, agrees with the state machine's
// scan, and whatever decodes re-encodes to the same bytes (the format is
// canonical).
func FuzzDecodeBatch(f *testing.F) {
	f.Add(encodeBatch(nil, codecEpoch, sampleRecords()))
	f.Add(appendEpoch(nil, codecEpoch))
	f.Add([]byte{kindBatch})
	f.Fuzz(func(t *testing.T, in []byte) {
		h, recs, err := decodeBatch(nil, in)
		sh, _, _, _, scanErr := scanEntry(in)
		isMarker := scanErr == nil && sh.kind == kindEpoch
		if (err == nil) != (scanErr == nil && !isMarker) {
			t.Fatalf("decodeBatch err %v but scanEntry err %v (kind %d)", err, scanErr, sh.kind)
		}
		if err != nil {
			return
		}
		var out []byte
		if h.kind == kindBatch {
			out = encodeBatch(nil, h.epoch, recs)
		} else {
			out = []byte{kindLegacyBatch, 0, 0}
			for i := range recs {
				out = binary.AppendUvarint(out, uint64(len(recs[i].Resource)))
				out = append(out, recs[i].Resource...)
				out = appendValue(out, &recs[i])
			}
			setBatchCount(out, len(recs))
		}
		if !bytes.Equal(out, in) {
			t.Fatalf("encode(decode(%x)) = %x", in, out)
		}
	})
}
