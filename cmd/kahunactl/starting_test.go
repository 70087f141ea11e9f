package main

import (
	"strings"
	"testing"

	"github.com/kahunago/kahuna/admin"
	"github.com/kahunago/kahuna/durability"
	"github.com/kahunago/kahuna/internal/node"
	"github.com/kahunago/kahuna/internal/testport"
)

// TestLockSaysWhenNodesCannotServe: against a member that is still
// waiting for its cluster, lock says the node answers MustRetry (not
// that it does not answer), and status says it is starting and what it
// waits for.
func TestLockSaysWhenNodesCannotServe(t *testing.T) {
	self := testport.Listen(t)
	members := map[uint64]admin.Member{
		1: {RaftAddress: self.Addr().String(), Endpoint: "http://127.0.0.1:1"},
		2: {RaftAddress: testport.Addr(t), Endpoint: "http://127.0.0.1:2"},
		3: {RaftAddress: testport.Addr(t), Endpoint: "http://127.0.0.1:3"},
	}
	n, err := node.Start(node.Config{
		NodeID: 1, Members: members, RaftAddress: members[1].RaftAddress, RaftListener: self,
		DataDir: t.TempDir(), Partitions: 2, ListenAddress: "127.0.0.1:0",
		InitialClusterState: durability.ClusterStateNew,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ep := "http://" + n.ListenAddress()
	r := ctl(t, "lock", "x", "--timeout", "500ms", "--endpoints", ep).want(t, exitError, "lock on a starting member")
	oneStderrLine(t, r, "lock x: the nodes kept answering MustRetry until 500ms ran out: the node is starting")
	r = ctl(t, "status", "--endpoints", ep).want(t, exitError, "status of a starting member")
	if !strings.Contains(r.stdout, " starting ") || !strings.Contains(r.stdout, "node 1 is starting, waiting for the cluster: 2 of 2 partitions without a leader") {
		t.Fatalf("status of a starting member: %s", r)
	}
}
