// Package durability stores persistent locks. The lock actors decide every
// grant, extend and unlock; a Backend only makes the resulting record durable
// (replicated and applied) and reads it back.
package durability

import (
	"bytes"
	"errors"
)

// Record is the durable state of one persistent lock, exactly as the
// partition leader decided it. Followers and replays never re-evaluate it.
type Record struct {
	Resource string
	Owner    []byte // nil when Unlocked
	// ExpiresMs is the lease end in wall-clock unix milliseconds.
	ExpiresMs int64
	Token     int64
	// Revision increases by one on every write of the resource. Apply is
	// advance-only on (Token, Revision): a record that does not move the
	// pair strictly forward is ignored.
	Revision       uint64
	Locked         bool // false = Unlocked (owner cleared, token kept)
	LastModifiedMs int64
	// Remove, in a proposal: delete the stored record instead of writing
	// it; Token is the record's token, which raises the partition's token
	// floor (see Backend.Load). It applies under the same guard as a write,
	// and only if a record is stored.
	Remove bool
	// Limit and Slots, for a semaphore, are its limit and its permits, one
	// per slot (len(Slots) == Limit, or more after a shrink: the slots at
	// or above Limit are kept for their generations); Owner is then nil, Token the highest
	// slot token, and Locked whether any slot has an owner. Limit is 0 for
	// a lock.
	Limit int
	Slots []Slot
	// RW, for a read/write lock, says Slots are its holders (any number,
	// Limit 0): its readers, or its writer when Exclusive.
	RW, Exclusive bool

	// Renewed says the holder's lease was renewed by a recorded Extend:
	// its later renewals may be kept in the leader's memory only, so the
	// stored expiry is a lower bound, and a new leader gives the lease at
	// least its TTL (ExpiresMs less LastModifiedMs) from its own start.
	Renewed bool

	// Base, in a proposal, is the Index of the stored record the decision
	// was made from (0: none stored). The state machine applies the record
	// only if the stored one is still at Base (compare-and-set).
	Base uint64
	// Term, in a proposal, is the leader term the decision was made in;
	// with the backend's replica ID it is the record's epoch, which must be
	// the partition's current one for the record to apply.
	Term uint64
	// Index, in a loaded record, is the Raft index of the entry that last
	// wrote it (0 for records stored before the fence existed).
	Index uint64
}

// Slot is one permit of a semaphore's record.
type Slot struct {
	Owner     []byte // nil: free
	ExpiresMs int64
	Token     int64 // the slot's generation: the token of its last grant
}

// cloneSlots copies slots and their owners out of a buffer they alias.
func cloneSlots(slots []Slot) []Slot {
	if slots == nil {
		return nil
	}
	out := make([]Slot, len(slots))
	for i, s := range slots {
		out[i] = Slot{Owner: bytes.Clone(s.Owner), ExpiresMs: s.ExpiresMs, Token: s.Token}
	}
	return out
}

// Completion receives the outcome of one proposed record.
type Completion interface {
	// Committed is called exactly once per Propose, from a backend goroutine.
	// It must not block. err is nil when the record was applied, and index
	// is then the Raft index it was applied at (the record's new Index; for
	// a Remove, the index that deleted it); otherwise err matches one of
	// ErrFenced, ErrUnknownOutcome or ErrRetry.
	Committed(index uint64, err error)
}

var (
	// ErrRetry: the record was certainly not committed (no leader, queue
	// full, shutting down before it was sent). Safe to retry.
	ErrRetry = errors.New("durability: not committed, retry")
	// ErrUnknownOutcome: the proposal was sent but timed out, was dropped or
	// was aborted; it may still commit. The caller must treat its cached
	// state as unknown and reload it from the store.
	ErrUnknownOutcome = errors.New("durability: outcome unknown")
	// ErrFenced: the record committed but the state machine rejected
	// it: it was decided in an epoch that is not the partition's current
	// one, or from a base the stored record has moved past (or was
	// removed from), or with a token below the stored one (with none
	// stored, below the token floor). Nothing changed; the decider's
	// cached entry is stale and must be reloaded.
	ErrFenced = errors.New("durability: record rejected by the fence (stale epoch or base), not applied")
	// ErrClosed: the backend is closed.
	ErrClosed = errors.New("durability: closed")
)

// Backend makes lock records durable, partition by partition. Partitions
// are numbered 0..n-1.
type Backend interface {
	// Propose queues rec for partition p and returns at once; c learns the
	// outcome. Records of one partition commit in Propose order. rec is not
	// retained after Propose returns.
	Propose(p int, rec *Record, c Completion)
	// ProposeGroup queues recs, each of another resource of partition p
	// and decided in one term, as one Raft entry applied all or nothing:
	// if the fence refuses one record (its base or epoch is stale), none
	// is applied. comps[i] learns recs[i]'s outcome, which is the same for
	// all. recs are not retained after ProposeGroup returns.
	ProposeGroup(p int, recs []*Record, comps []Completion)
	// Load returns the applied record of resource in partition p from local
	// storage. The caller is responsible for serving p only in an epoch it
	// fenced (Raft.Fence), so the local state is current. When not found,
	// rec.Token is the partition's token floor, the least token a first
	// grant of resource may take (above every token of a removed record),
	// rec.Resource is resource and the rest is zero.
	Load(p int, resource string) (rec Record, found bool, err error)
	// Close stops the backend. In-flight proposals complete with an error.
	Close() error
}

// LeaderEvent reports a change of leadership of a partition as seen by this
// node. LeaderID 0 means no leader is known.
type LeaderEvent struct {
	Partition int
	LeaderID  uint64
	Term      uint64
	IsSelf    bool
}
