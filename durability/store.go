package durability

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/dgraph-io/badger/v4"
)

// One badger DB serves every partition. Keys:
//
//	's' shard:8 'a'            applied Raft index of the shard (8 bytes BE)
//	's' shard:8 'e'            the shard's epoch: term, replica (8 bytes BE each)
//	's' shard:8 'f'            the shard's token floor (8 bytes BE int64; absent: 0)
//	's' shard:8 't'            the shard's ephemeral token reach (8 bytes BE int64; absent: 0)
//	's' shard:8 'g'            the shard's ephemeral grace: reign TTL bound, carried (ms, 8 bytes BE each; absent: 0)
//	's' shard:8 'h'            live ephemeral leases handed over: state:byte term:8 replica:8 leases (codec.go)
//	's' shard:8 'r' resource   the resource's stored value (codec.go)
//
// The token floor is above the token of every record removed from the
// shard, so a name granted again after its record was removed still gets
// a larger fencing token than it ever had. It only grows.
//
// The ephemeral token reach is above every token an ephemeral lock of the
// shard was granted: a leader grants ephemeral tokens only below a reach
// it raised in its own epoch (Raft.RaiseReach), so the next leader, which
// reads it after its fence, starts above all of them. It only grows.
//
// The ephemeral grace is what a new leader waits out before it serves, so
// that no ephemeral lease an earlier leader granted is still live: the
// reign TTL bound is above the TTL of every ephemeral grant or extension of
// the current epoch (Raft.RaiseEphemeralTTL raises it before a longer one);
// an epoch marker adds it to the carried bound, which the next raise (made
// once that leader waited it out and serves) clears.
//
// The hand-over carries a leader's live ephemeral leases to the next one
// when it stops deciding for the shard on purpose (a transfer, a clean
// close): offered in the leader's epoch, it is voided by any later reach
// or grace entry of that epoch (the leader served again) and taken by the
// next epoch marker if still offered then: that leader keeps the leases
// and waits for none of them (statemachine.go).
const (
	keyApplied  byte = 'a'
	keyEpoch    byte = 'e'
	keyFloor    byte = 'f'
	keyReach    byte = 't'
	keyGrace    byte = 'g'
	keyHandover byte = 'h'
	keyRecord   byte = 'r'
	shardKeyLen      = 1 + 8 + 1
)

func shardKey(dst []byte, shard uint64, kind byte) []byte {
	dst = append(dst, 's')
	dst = binary.BigEndian.AppendUint64(dst, shard)
	return append(dst, kind)
}

func recordKey(dst []byte, shard uint64, resource []byte) []byte {
	return append(shardKey(dst, shard, keyRecord), resource...)
}

// badgerOptions: the Raft log is the durability source, so no sync per
// write (dragonboat calls Sync before snapshots), no conflict detection
// (each shard has one writer and its own key space), small memory.
func badgerOptions(r *resolved) badger.Options {
	var opts badger.Options
	if r.Dir == "" {
		opts = badger.DefaultOptions("").WithInMemory(true)
	} else {
		opts = badger.DefaultOptions(filepath.Join(r.Dir, "state"))
	}
	var lg badger.Logger // nil silences badger
	if r.Logger != nil {
		lg = badgerLogger{r.Logger}
	}
	return opts.
		WithLogger(lg).
		WithSyncWrites(false).
		WithDetectConflicts(false).
		WithMetricsEnabled(false).
		WithNumVersionsToKeep(1).
		WithMemTableSize(8 << 20). // also caps a txn at 15% of it
		WithNumMemtables(2).
		WithBlockCacheSize(8 << 20).
		WithIndexCacheSize(8 << 20).
		WithNumLevelZeroTables(2).
		WithNumLevelZeroTablesStall(4).
		WithNumCompactors(2).
		WithValueLogFileSize(16 << 20)
}

func openBadger(opts badger.Options) (*badger.DB, error) {
	db, err := badger.Open(opts)
	if err != nil {
		where := opts.Dir
		if opts.InMemory {
			where = "memory"
		}
		return nil, fmt.Errorf("durability: open badger at %s: %w", where, err)
	}
	return db, nil
}

// getter reads one key as of some state: a badger txn (txnGetter) or a
// shard's applied state, pending writes included (view).
type getter interface {
	get(key []byte) (val []byte, found bool, err error)
}

// txnGetter reads a badger txn.
type txnGetter struct{ txn *badger.Txn }

func (g txnGetter) get(key []byte) ([]byte, bool, error) {
	item, err := g.txn.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	v, err := item.ValueCopy(nil)
	return v, err == nil, err
}

// readApplied returns the stored applied index of shard (0 if none).
func readApplied(g getter, shard uint64) (uint64, error) {
	v, found, err := g.get(shardKey(nil, shard, keyApplied))
	if err != nil || !found {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("%w: applied index of %d bytes", errCorrupt, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// readEpoch returns the stored epoch of shard (zero if none).
func readEpoch(g getter, shard uint64) (Epoch, error) {
	v, found, err := g.get(shardKey(nil, shard, keyEpoch))
	if err != nil || !found {
		return Epoch{}, err
	}
	if len(v) != 16 {
		return Epoch{}, fmt.Errorf("%w: epoch of %d bytes", errCorrupt, len(v))
	}
	return Epoch{Term: binary.BigEndian.Uint64(v[:8]), Replica: binary.BigEndian.Uint64(v[8:])}, nil
}

// readFloor returns the stored token floor of shard (0 if none).
func readFloor(g getter, shard uint64) (int64, error) {
	v, found, err := g.get(shardKey(nil, shard, keyFloor))
	if err != nil || !found {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("%w: token floor of %d bytes", errCorrupt, len(v))
	}
	return int64(binary.BigEndian.Uint64(v)), nil
}

// readReach returns the stored ephemeral token reach of shard (0 if none).
func readReach(g getter, shard uint64) (int64, error) {
	v, found, err := g.get(shardKey(nil, shard, keyReach))
	if err != nil || !found {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("%w: token reach of %d bytes", errCorrupt, len(v))
	}
	return int64(binary.BigEndian.Uint64(v)), nil
}

// readGrace returns the stored ephemeral grace of shard: the reign TTL
// bound and the carried bound, in milliseconds (0 if none).
func readGrace(g getter, shard uint64) (reignMs, carriedMs int64, err error) {
	v, found, err := g.get(shardKey(nil, shard, keyGrace))
	if err != nil || !found {
		return 0, 0, err
	}
	if len(v) != 16 {
		return 0, 0, fmt.Errorf("%w: ephemeral grace of %d bytes", errCorrupt, len(v))
	}
	return int64(binary.BigEndian.Uint64(v[:8])), int64(binary.BigEndian.Uint64(v[8:])), nil
}

// States of a stored hand-over.
const (
	handOffered byte = 1 // by the leader of its epoch, which stopped deciding
	handTaken   byte = 2 // by the leader of its epoch, which keeps the leases
)

// handover is a shard's stored hand-over (state 0: none).
type handover struct {
	state     byte
	epoch     Epoch
	leases    []byte // the leases part of the entry (codec.go)
	maxLeftMs int64  // the longest lease's time left
}

// encode returns the stored value of h.
func (h handover) encode() []byte {
	v := make([]byte, 0, 17+len(h.leases))
	v = append(v, h.state)
	v = binary.BigEndian.AppendUint64(v, h.epoch.Term)
	v = binary.BigEndian.AppendUint64(v, h.epoch.Replica)
	return append(v, h.leases...)
}

// newHandover is a hand-over of state and epoch for the leases part b,
// validated.
func newHandover(state byte, e Epoch, b []byte) (handover, error) {
	leases, err := decodeLeases(b)
	if err != nil {
		return handover{}, err
	}
	h := handover{state: state, epoch: e, leases: append([]byte(nil), b...)}
	for _, l := range leases {
		h.maxLeftMs = max(h.maxLeftMs, leftMs(l.Left))
	}
	return h, nil
}

// readHandover returns the stored hand-over of shard (state 0: none).
func readHandover(g getter, shard uint64) (handover, error) {
	v, found, err := g.get(shardKey(nil, shard, keyHandover))
	if err != nil || !found {
		return handover{}, err
	}
	return parseHandover(v)
}

// parseHandover decodes a stored hand-over.
func parseHandover(v []byte) (handover, error) {
	if len(v) < 17 || (v[0] != handOffered && v[0] != handTaken) {
		return handover{}, fmt.Errorf("%w: hand-over of %d bytes", errCorrupt, len(v))
	}
	e := Epoch{Term: binary.BigEndian.Uint64(v[1:9]), Replica: binary.BigEndian.Uint64(v[9:17])}
	h, err := newHandover(v[0], e, v[17:])
	if err != nil {
		return handover{}, fmt.Errorf("hand-over: %w", err)
	}
	return h, nil
}

// loadRecord reads one stored record; the result owns its memory. Without
// one it returns resource at the shard's token floor (Backend.Load), read
// after the absence: the floor only grows, so it is at least the floor
// that goes with the absence.
func loadRecord(g getter, shard uint64, resource string) (Record, bool, error) {
	v, found, err := g.get(recordKey(nil, shard, []byte(resource)))
	if err != nil {
		return Record{}, false, err
	}
	if !found {
		floor, err := readFloor(g, shard)
		if err != nil {
			return Record{}, false, err
		}
		return Record{Resource: resource, Token: floor}, false, nil
	}
	rec := Record{Resource: resource}
	if err := decodeStored(v, &rec); err != nil {
		return Record{}, false, err
	}
	return rec, true, nil
}
