package durability

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"reflect"
	"testing"
)

func sampleRecords() []Record {
	return []Record{
		{Resource: "tenant/a/x", Owner: []byte("owner-1"), ExpiresMs: 1_700_000_000_123, Token: 1, Revision: 1, Locked: true, LastModifiedMs: 1_700_000_000_000},
		{Resource: "tenant/a/y", Token: 7, Revision: 42, LastModifiedMs: -1},
		{Resource: "", Owner: []byte{0, 0xff}, ExpiresMs: math.MinInt64, Token: math.MaxInt64, Revision: math.MaxUint64, Locked: true, LastModifiedMs: math.MaxInt64},
		{Resource: "ünïcødé/资源", Owner: bytes.Repeat([]byte{'o'}, 300), Token: -5, Revision: 0},
	}
}

func TestCodecRoundTrip(t *testing.T) {
	recs := sampleRecords()
	enc := encodeBatch(nil, recs)
	want := batchHeaderLen
	for i := range recs {
		want += recordSize(&recs[i])
	}
	if len(enc) != want {
		t.Fatalf("encoded %d bytes, recordSize predicts %d", len(enc), want)
	}
	got, err := decodeBatch(nil, enc)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if !reflect.DeepEqual(got, recs) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, recs)
	}
	if again := encodeBatch(nil, got); !bytes.Equal(again, enc) {
		t.Fatalf("re-encoding differs")
	}
	// Each record's value decodes alone and leads with (Token, Revision).
	body := enc[batchHeaderLen:]
	for i := range recs {
		var rec Record
		res, val, rest, err := nextRecord(body, &rec)
		if err != nil || string(res) != recs[i].Resource {
			t.Fatalf("record %d: res %q err %v", i, res, err)
		}
		var v Record
		if err := decodeValue(val, &v); err != nil {
			t.Fatalf("record %d value: %v", i, err)
		}
		v.Resource = recs[i].Resource
		if !reflect.DeepEqual(v, recs[i]) {
			t.Fatalf("record %d value: got %+v", i, v)
		}
		tok, rev, err := valueOrder(val)
		if err != nil || tok != recs[i].Token || rev != recs[i].Revision {
			t.Fatalf("record %d order: %d %d %v", i, tok, rev, err)
		}
		body = rest
	}
}

func TestDecodeBatchRejectsCorrupt(t *testing.T) {
	valid := encodeBatch(nil, sampleRecords()[:2])
	h := []byte{batchVersion, 0, 1} // header of a one-record batch
	cases := map[string][]byte{
		"empty":            nil,
		"header only":      h,
		"zero count":       {batchVersion, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
		"count too high":   append([]byte{batchVersion, 0, 3}, valid[3:]...),
		"count too low":    append([]byte{batchVersion, 0, 1}, valid[3:]...),
		"wrong version":    append([]byte{2}, valid[1:]...),
		"trailing garbage": append(bytes.Clone(valid), 0x05),
		"non-minimal len":  append(bytes.Clone(h), 0x80, 0x00, 0, 0, 0, 0, 0, 0),
		"unknown flag":     append(bytes.Clone(h), 0, 0x02, 0, 0, 0, 0, 0),
		"huge length":      append(bytes.Clone(h), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01),
		"varint overflow":  append(bytes.Clone(h), 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f),
		"owner too long":   append(bytes.Clone(h), 0, 0, 0, 0, 0, 0, 5, 'a'),
	}
	for i := 1; i < len(valid); i++ {
		cases[fmt.Sprintf("truncated at %d", i)] = valid[:i]
	}
	for name, in := range cases {
		if recs, err := decodeBatch(nil, in); !errors.Is(err, errCorrupt) {
			t.Errorf("%s: decode(%x) = %v, %v; want errCorrupt", name, in, recs, err)
		}
		if _, _, err := scanBatch(in); err == nil {
			t.Errorf("%s: scanBatch accepted %x", name, in)
		}
	}
	if err := decodeValue([]byte{0, 0, 0, 0, 0, 0, 9}, &Record{}); !errors.Is(err, errCorrupt) {
		t.Errorf("value with trailing byte accepted: %v", err)
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

// FuzzDecodeBatch: decoding never panics, and whatever decodes re-encodes
// to the same bytes (the format is canonical).
func FuzzDecodeBatch(f *testing.F) {
	f.Add(encodeBatch(nil, sampleRecords()))
	f.Add([]byte{batchVersion})
	f.Fuzz(func(t *testing.T, in []byte) {
		recs, err := decodeBatch(nil, in)
		_, _, scanErr := scanBatch(in)
		if (err == nil) != (scanErr == nil) {
			t.Fatalf("decodeBatch err %v but scanBatch err %v", err, scanErr)
		}
		if err != nil {
			return
		}
		if out := encodeBatch(nil, recs); !bytes.Equal(out, in) {
			t.Fatalf("encode(decode(%x)) = %x", in, out)
		}
	})
}
