// Package admin is the admin API of kahuna nodes, served next to the
// lock API: its paths and JSON messages, the one client that calls it
// (kahunactl, and members calling each other to pass on changes, join
// and check a balancing target), and the HTTP handler a node serves it
// with (internal/node's Node.AdminHandler wraps NewHandler).
//
// The paths and JSON field names are the wire contract between kahunactl
// and members of any version: change them only compatibly.
package admin

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Admin API paths.
const (
	// PartitionsPath: GET is the leader of every partition as the node
	// sees it (PartitionsView).
	PartitionsPath = "/v1/admin/partitions"
	// TransferPath: POST a TransferRequest to move a partition's
	// leadership; 202 when asked of Raft. A node that does not lead the
	// partition passes the request on to the one that does, once.
	TransferPath = "/v1/admin/transfer-leadership"
	// MembersPath: GET lists the members (MembersView); POST adds one (a
	// MemberRequest); DELETE MembersPath/ID removes one. POST and DELETE
	// answer a MemberChangeResult: 200 when every partition is done, else
	// 503 (retry the same request to finish) or 409 (refused for good,
	// e.g. a removed ID).
	MembersPath = "/v1/admin/members"
	// StatusPath: GET is the node's view of every partition (NodeStatus).
	StatusPath = "/v1/admin/status"
	// LocksPath: GET ?prefix=&after=&limit=&partitions=0,3 lists the live
	// locks of the named partitions (none named: all) that the node
	// serves, as it would answer the lock API's GET /v1/locks for them
	// alone (LocksView): one member's share of a listing, which the member
	// asked for the whole one gathers from each partition's leader. It is
	// never passed on.
	LocksPath = "/v1/admin/locks"
)

// forwardedHeader marks a request between members: the receiver serves
// it itself and never passes it on again.
const forwardedHeader = "Kahuna-Forwarded"

// PartitionInfo is one partition as a node sees it.
type PartitionInfo struct {
	Partition int    `json:"partition"`
	Leader    uint64 `json:"leader"`  // 0 = none known
	Serving   bool   `json:"serving"` // this node serves it now
}

// PartitionsView is GET PartitionsPath: the partitions as one node sees
// them.
type PartitionsView struct {
	Node       uint64          `json:"node"`
	Partitions []PartitionInfo `json:"partitions"`
}

// TransferRequest asks to move a partition's leadership.
type TransferRequest struct {
	Partition int    `json:"partition"`
	To        uint64 `json:"to"`
}

// MemberInfo is one member in a MembersView.
type MemberInfo struct {
	ID          uint64 `json:"id"`
	RaftAddress string `json:"raft_address"`
	Endpoint    string `json:"endpoint"`
	// Joined: the member has started with its replicas (a founding
	// member, or an added one that joined); false for one added and not
	// started yet.
	Joined bool `json:"joined"`
	// Partitions where it is a voter, as Raft on the answering node says.
	Partitions []int `json:"partitions"`
}

// MembersView is GET MembersPath: the members as one node knows them.
type MembersView struct {
	Node         uint64       `json:"node"`
	DeploymentID uint64       `json:"deployment_id"`
	TokenHash    string       `json:"token_hash"`
	Members      []MemberInfo `json:"members"`
	Removed      []uint64     `json:"removed,omitempty"`
}

// MemberRequest is POST MembersPath: add member ID. Op and Partitions
// are for requests between members (WithPeerSecret).
type MemberRequest struct {
	ID          uint64 `json:"id"`
	RaftAddress string `json:"raft_address,omitempty"`
	Endpoint    string `json:"endpoint,omitempty"`
	// Op, between members: "add" or "remove" on Partitions (which the
	// receiver leads), "learn" (record an added member), "forget" (record
	// a removal), "joined" (the member has started).
	Op         string `json:"op,omitempty"`
	Partitions []int  `json:"partitions,omitempty"`
}

// MemberChangeResult answers a membership change: the partitions where it
// is done and those left, with why.
type MemberChangeResult struct {
	Op      string         `json:"op"`
	ID      uint64         `json:"id"`
	Done    []int          `json:"done"`
	Left    map[int]string `json:"left,omitempty"`
	Removed bool           `json:"removed,omitempty"` // refused: a removed ID
	Error   string         `json:"error,omitempty"`
}

// PartitionStatus is one partition in a NodeStatus.
type PartitionStatus struct {
	Partition int      `json:"partition"`
	Leader    uint64   `json:"leader"` // 0: none known
	Term      uint64   `json:"term"`
	Applied   uint64   `json:"applied"` // Raft index applied here
	Serving   bool     `json:"serving"` // this node serves it now (leader with a live lease)
	Voters    []uint64 `json:"voters"`
	Running   bool     `json:"running"` // this node runs a replica of it
}

// NodeStatus is GET StatusPath: one node's view of every partition.
type NodeStatus struct {
	Node uint64 `json:"node"`
	// Healthy: this node runs every partition and knows a leader for each.
	Healthy    bool              `json:"healthy"`
	Partitions []PartitionStatus `json:"partitions"`
	// NoSpace, when set, says why this node refuses new persistent locks:
	// its disk is short of space (kahuna.Config.DiskReserve, StoreQuota).
	NoSpace string `json:"noSpace,omitempty"`
	// Starting, while the node has not finished starting, says what it
	// waits for (partitions without a leader, members not reachable).
	Starting string `json:"starting,omitempty"`
}

// LocksRequest is GET LocksPath: the live locks whose name starts with
// Prefix, after the name After, at most Limit (0: the node's default),
// of Partitions (nil: every partition the node serves).
type LocksRequest struct {
	Prefix     string
	After      string
	Limit      int
	Partitions []int
}

// Lock is one live lock in a LocksView.
type Lock struct {
	Resource     string `json:"resource"`
	Owner        []byte `json:"owner"` // base64 in JSON
	FencingToken int64  `json:"fencingToken"`
	// ExpiresMs is the lease end, wall-clock unix milliseconds of the
	// answering node's clock.
	ExpiresMs  int64 `json:"expiresMs"`
	Durability int32 `json:"durability"` // 0 ephemeral, 1 persistent
	// Holders, for a semaphore or a read/write lock, are its live holders.
	Holders []Holder `json:"holders,omitempty"`
}

// Holder is one live holder of a semaphore (its slot) or of a read/write
// lock.
type Holder struct {
	Slot         int    `json:"slot"`
	Owner        []byte `json:"owner"` // base64 in JSON
	FencingToken int64  `json:"fencingToken"`
	ExpiresMs    int64  `json:"expiresMs"`
}

// LocksView answers GET LocksPath: the live locks, in name order, of the
// partitions asked for that the node serves; Next, when set, is the
// After of the next page (there may be more). NotServed lists the
// partitions asked for that the node does not serve now.
type LocksView struct {
	Node      uint64 `json:"node"`
	Locks     []Lock `json:"locks"`
	Next      string `json:"next,omitempty"`
	NotServed []int  `json:"notServed,omitempty"`
}

// ErrInvalidList: a list request the node refuses as malformed (a bad
// limit, an over-long prefix); nothing was read. The API answers 400.
var ErrInvalidList = errors.New("invalid list request")

// ErrMemberRemoved: the ID was removed from the cluster; Raft never lets a
// removed ID back (its log and votes are gone with it). Add the node under
// a new ID. The API answers 409 with MemberChangeResult.Removed set.
var ErrMemberRemoved = errors.New("kahuna: member ID was removed from the cluster, and a removed ID can never come back: add the node under a new ID")

// ErrNotMember: RemoveMember of an ID that is not a member and never was
// one: nothing is removed (and the ID is not banned, as a removed one is).
// The API answers 404.
var ErrNotMember = errors.New("not a member of the cluster")

// ErrMemberConflict: a member with this ID is in the cluster at another
// Raft address. The API answers 409.
var ErrMemberConflict = errors.New("a member with this ID has another Raft address")

// ErrNotLeader: the node asked to transfer a partition's leadership does
// not lead it (Node.TransferLeadership). The API passes the request on
// to the leader, or answers 503 while none is known.
var ErrNotLeader = errors.New("not the partition's leader")

// MembershipError is a membership change that did not finish on every
// partition: Done lists the partitions where it applied, Left the others
// with why. Making the same change again finishes it. The API answers it
// 503 with a MemberChangeResult.
type MembershipError struct {
	Op   string // "add" or "remove"
	ID   uint64
	Done []int
	Left map[int]error
}

func (e *MembershipError) Error() string {
	left := slices.Sorted(maps.Keys(e.Left))
	var why []string
	for _, p := range left {
		why = append(why, fmt.Sprintf("partition %d: %v", p, e.Left[p]))
	}
	return fmt.Sprintf("kahuna: %s member %d: done on partitions %v, left on %v (%s); run it again to finish",
		e.Op, e.ID, e.Done, left, strings.Join(why, "; "))
}

// Unwrap returns the errors of the partitions left.
func (e *MembershipError) Unwrap() []error { return slices.Collect(maps.Values(e.Left)) }
