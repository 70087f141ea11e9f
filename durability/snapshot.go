package durability

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/dgraph-io/badger/v4"
	sm "github.com/lni/dragonboat/v4/statemachine"
)

// Snapshot stream of one shard:
//
//	version:byte uvarint(applied index) uvarint(epoch term) uvarint(epoch replica)
//	varint(token floor) varint(ephemeral token reach)
//	varint(grace reign ms) varint(grace carried ms)
//	{ 0x01 uvarint(len) resource uvarint(len) stored value }*
//	0x00 uvarint(record count)
//
// It carries the applied index because RecoverFromSnapshot gets none, and
// the epoch, token floor and reach because the fence and the tokens depend
// on them. Version 1 (before the fence) had no epoch, version 2 (before
// removals) no floor, version 3 (before ephemeral leases were fenced) no
// reach and grace, version 4 (before hand-overs) no hand-over: each reads
// as zero.
const (
	snapshotVersion   byte = 5
	snapshotVersionV4 byte = 4
	snapshotVersionV3 byte = 3
	snapshotVersionV2 byte = 2
	snapshotVersionV1 byte = 1
	tagRecord         byte = 1
	tagEnd            byte = 0
	stopCheckEvery         = 256
)

type snapshotView struct {
	txn     *badger.Txn // a read txn is a point-in-time view
	applied uint64
	epoch   Epoch
	floor   int64
	reach   int64
	grace   grace
	handed  handover
}

// PrepareSnapshot pins the shard's state; dragonboat runs it exclusively
// with Update, so the applied index matches the data.
func (s *stateMachine) PrepareSnapshot() (any, error) {
	if err := s.pend.flush(); err != nil {
		return nil, fmt.Errorf("durability: shard %d: prepare snapshot: %w", s.shard, err)
	}
	txn := s.db.NewTransaction(false)
	g := txnGetter{txn}
	applied, err := readApplied(g, s.shard)
	var (
		epoch        Epoch
		floor, reach int64
	)
	if err == nil {
		epoch, err = readEpoch(g, s.shard)
	}
	if err == nil {
		floor, err = readFloor(g, s.shard)
	}
	if err == nil {
		reach, err = readReach(g, s.shard)
	}
	var gr grace
	if err == nil {
		gr.reignMs, gr.carriedMs, err = readGrace(g, s.shard)
	}
	var h handover
	if err == nil {
		h, err = readHandover(g, s.shard)
	}
	if err != nil {
		txn.Discard()
		return nil, fmt.Errorf("durability: shard %d: prepare snapshot: %w", s.shard, err)
	}
	return &snapshotView{txn: txn, applied: applied, epoch: epoch, floor: floor, reach: reach, grace: gr, handed: h}, nil
}

// SaveSnapshot streams the view taken by PrepareSnapshot.
func (s *stateMachine) SaveSnapshot(ctx any, w io.Writer, stop <-chan struct{}) error {
	v := ctx.(*snapshotView)
	defer v.txn.Discard()
	if err := s.saveSnapshot(v, w, stop); err != nil {
		return fmt.Errorf("durability: shard %d: save snapshot: %w", s.shard, err)
	}
	return nil
}

func (s *stateMachine) saveSnapshot(v *snapshotView, w io.Writer, stop <-chan struct{}) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	buf := binary.AppendUvarint([]byte{snapshotVersion}, v.applied)
	buf = binary.AppendUvarint(buf, v.epoch.Term)
	buf = binary.AppendUvarint(buf, v.epoch.Replica)
	buf = binary.AppendVarint(buf, v.floor)
	buf = binary.AppendVarint(buf, v.reach)
	buf = binary.AppendVarint(buf, v.grace.reignMs)
	buf = binary.AppendVarint(buf, v.grace.carriedMs)
	var hv []byte
	if v.handed.state != 0 {
		hv = v.handed.encode()
	}
	buf = binary.AppendUvarint(buf, uint64(len(hv)))
	buf = append(buf, hv...)
	if _, err := bw.Write(buf); err != nil {
		return err
	}
	it := v.txn.NewIterator(badger.IteratorOptions{
		PrefetchValues: true,
		PrefetchSize:   64,
		Prefix:         shardKey(nil, s.shard, keyRecord),
	})
	defer it.Close()
	var n uint64
	for it.Rewind(); it.Valid(); it.Next() {
		if n%stopCheckEvery == 0 && stopped(stop) {
			return sm.ErrSnapshotStopped
		}
		item := it.Item()
		res := item.Key()[shardKeyLen:]
		buf = append(buf[:0], tagRecord)
		buf = binary.AppendUvarint(buf, uint64(len(res)))
		buf = append(buf, res...)
		err := item.Value(func(val []byte) error {
			buf = binary.AppendUvarint(buf, uint64(len(val)))
			buf = append(buf, val...)
			return nil
		})
		if err != nil {
			return err
		}
		if _, err := bw.Write(buf); err != nil {
			return err
		}
		n++
	}
	buf = binary.AppendUvarint(append(buf[:0], tagEnd), n)
	if _, err := bw.Write(buf); err != nil {
		return err
	}
	return bw.Flush()
}

// RecoverFromSnapshot replaces the shard's state. Crash safety: the applied
// index is deleted first and written last, so a crash in between reopens
// with index 0 and dragonboat installs the snapshot again.
func (s *stateMachine) RecoverFromSnapshot(r io.Reader, stop <-chan struct{}) error {
	// The records are replaced wholesale: what was pending is of the old
	// state, and no flush may write it in the middle of the new one.
	s.pend.flushMu.Lock()
	defer s.pend.flushMu.Unlock()
	s.pend.discard()
	s.orders.clear()
	if err := s.recoverSnapshot(bufio.NewReaderSize(r, 64<<10), stop); err != nil {
		return fmt.Errorf("durability: shard %d: recover snapshot: %w", s.shard, err)
	}
	return nil
}

func (s *stateMachine) recoverSnapshot(br *bufio.Reader, stop <-chan struct{}) error {
	ver, err := br.ReadByte()
	if err != nil {
		return err
	}
	if ver < snapshotVersionV1 || ver > snapshotVersion {
		return fmt.Errorf("%w: snapshot version %d", errCorrupt, ver)
	}
	applied, err := binary.ReadUvarint(br)
	if err != nil {
		return err
	}
	var (
		epoch        Epoch
		floor, reach int64
		gr           grace
	)
	if ver >= snapshotVersionV2 {
		if epoch.Term, err = binary.ReadUvarint(br); err != nil {
			return err
		}
		if epoch.Replica, err = binary.ReadUvarint(br); err != nil {
			return err
		}
	}
	if ver >= snapshotVersionV3 {
		if floor, err = binary.ReadVarint(br); err != nil {
			return err
		}
	}
	if ver >= snapshotVersionV4 {
		if reach, err = binary.ReadVarint(br); err != nil {
			return err
		}
		if gr.reignMs, err = binary.ReadVarint(br); err != nil {
			return err
		}
		if gr.carriedMs, err = binary.ReadVarint(br); err != nil {
			return err
		}
	}
	var (
		hv []byte
		h  handover
	)
	if ver >= snapshotVersion {
		n, err := binary.ReadUvarint(br)
		if err != nil {
			return err
		}
		if n > maxHandoverBytes+17 {
			return fmt.Errorf("%w: hand-over of %d bytes", errCorrupt, n)
		}
		if n > 0 {
			hv = make([]byte, n)
			if _, err := io.ReadFull(br, hv); err != nil {
				return err
			}
			if h, err = parseHandover(hv); err != nil {
				return err
			}
		}
	}
	if err := s.db.Update(func(txn *badger.Txn) error { return txn.Delete(s.appliedKey) }); err != nil {
		return err
	}
	if err := s.dropRecords(stop); err != nil {
		return err
	}
	if err := s.loadRecords(br, stop); err != nil {
		return err
	}
	var val [8]byte
	binary.BigEndian.PutUint64(val[:], applied)
	var ev [16]byte
	binary.BigEndian.PutUint64(ev[:8], epoch.Term)
	binary.BigEndian.PutUint64(ev[8:], epoch.Replica)
	var fv, rv [8]byte
	binary.BigEndian.PutUint64(fv[:], uint64(floor))
	binary.BigEndian.PutUint64(rv[:], uint64(reach))
	var gv [16]byte
	binary.BigEndian.PutUint64(gv[:8], uint64(gr.reignMs))
	binary.BigEndian.PutUint64(gv[8:], uint64(gr.carriedMs))
	err = s.db.Update(func(txn *badger.Txn) error {
		if err := txn.Set(s.epochKey, ev[:]); err != nil {
			return err
		}
		if err := txn.Set(s.floorKey, fv[:]); err != nil {
			return err
		}
		if err := txn.Set(s.reachKey, rv[:]); err != nil {
			return err
		}
		if err := txn.Set(s.graceKey, gv[:]); err != nil {
			return err
		}
		if len(hv) == 0 {
			if err := txn.Delete(s.handKey); err != nil {
				return err
			}
		} else if err := txn.Set(s.handKey, hv); err != nil {
			return err
		}
		return txn.Set(s.appliedKey, val[:])
	})
	if err != nil {
		return err
	}
	s.epoch, s.floor, s.reach, s.grace, s.handed = epoch, floor, reach, gr, h
	s.applied.Store(applied)
	return s.db.Sync()
}

// dropRecords deletes the shard's records without DropPrefix, which would
// stall every other shard's writes.
func (s *stateMachine) dropRecords(stop <-chan struct{}) error {
	wb := s.db.NewWriteBatch()
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: shardKey(nil, s.shard, keyRecord)})
		defer it.Close()
		n := 0
		for it.Rewind(); it.Valid(); it.Next() {
			if n%stopCheckEvery == 0 && stopped(stop) {
				return sm.ErrSnapshotStopped
			}
			if err := wb.Delete(it.Item().KeyCopy(nil)); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err != nil {
		wb.Cancel()
		return err
	}
	return wb.Flush()
}

func (s *stateMachine) loadRecords(br *bufio.Reader, stop <-chan struct{}) error {
	wb := s.db.NewWriteBatch()
	var rec Record
	for n := uint64(0); ; n++ {
		if n%stopCheckEvery == 0 && stopped(stop) {
			wb.Cancel()
			return sm.ErrSnapshotStopped
		}
		tag, err := br.ReadByte()
		if err == nil && tag == tagEnd {
			var count uint64
			if count, err = binary.ReadUvarint(br); err == nil && count != n {
				err = fmt.Errorf("%w: snapshot holds %d records, trailer says %d", errCorrupt, n, count)
			}
			if err != nil {
				wb.Cancel()
				return err
			}
			return wb.Flush()
		}
		if err == nil && tag != tagRecord {
			err = fmt.Errorf("%w: snapshot tag %d", errCorrupt, tag)
		}
		var res, val []byte
		if err == nil {
			res, err = readChunk(br)
		}
		if err == nil {
			val, err = readChunk(br)
		}
		if err == nil {
			err = decodeStored(val, &rec)
		}
		if err == nil {
			err = wb.Set(recordKey(nil, s.shard, res), val)
		}
		if err != nil {
			wb.Cancel()
			return err
		}
	}
}

func readChunk(br *bufio.Reader) ([]byte, error) {
	n, err := binary.ReadUvarint(br)
	if err != nil {
		return nil, err
	}
	if n > maxRecordBytes {
		return nil, fmt.Errorf("%w: snapshot field of %d bytes", errCorrupt, n)
	}
	b := make([]byte, n)
	_, err = io.ReadFull(br, b)
	return b, err
}

func stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}
