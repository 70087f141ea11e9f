package main

import (
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
)

// FuzzParseFlags feeds parseFlags arbitrary command lines (the fuzz input
// split on NUL bytes): it never panics, and options it accepts are
// consistent (ports and partitions in range, this node among the members,
// a data dir, a known --initial-cluster-state).
//
//	go test -run X -fuzz FuzzParseFlags -fuzztime 10m ./cmd/kahuna
func FuzzParseFlags(f *testing.F) {
	for _, args := range [][]string{
		{},
		{"--http-ports", "2070,2071", "--grpc-cleartext-ports", ""},
		{"--initial-cluster", "1=127.0.0.1:2073,2=127.0.0.1:3073", "--initial-cluster-endpoints", "1=http://127.0.0.1:2070,2=http://127.0.0.1:3070"},
		{"--initial-cluster", "1=127.0.0.1:2073", "--raft-nodeid", "2"},
		{"--initial-cluster-partitions", "0", "--cache-entry-ttl", "-1", "--log-level", "loud"},
		{"--host", "::1", "--raft-port", "65536", "--locks-workers", "-3"},
		{"--https-certificate", "c.pem"},
		{"-storage-path=/tmp/x", "extra"},
		{"--initial-cluster", "0=x:1,1=:", "--initial-cluster-endpoints", "1=,1=y"},
		{"--initial-cluster-state", "new", "--initial-cluster-token", "t"},
		{"--initial-cluster-state", "New"},
	} {
		f.Add(strings.Join(args, "\x00"))
	}
	f.Setenv("KAHUNA_HOME", f.TempDir())
	f.Fuzz(func(t *testing.T, line string) {
		var args []string
		if line != "" {
			args = strings.Split(line, "\x00")
		}
		o, err := parseFlags(args, io.Discard)
		cpuProfilePath = "" // a flag parseFlags sets globally; never start a profile here
		if err != nil {
			return
		}
		if o.partitions < 0 || o.partitions > 1024 { // 0: the default
			t.Fatalf("%q: accepted %d partitions", args, o.partitions)
		}
		if len(o.httpPorts)+len(o.grpcPorts)+len(o.httpsPorts) == 0 {
			t.Fatalf("%q: accepted no listener", args)
		}
		for _, p := range append(append(append([]int{o.raftPort}, o.httpPorts...), o.grpcPorts...), o.httpsPorts...) {
			if p < 1 || p > 65535 {
				t.Fatalf("%q: accepted port %d", args, p)
			}
		}
		if o.certFile == "" && len(o.httpsPorts) > 0 {
			t.Fatalf("%q: TLS ports without a certificate", args)
		}
		if o.nodeID == 0 || o.lockActors < 0 || o.cacheEntryTTL <= 0 || o.cacheEntriesToRemove < 1 || o.storagePath == "" {
			t.Fatalf("%q: accepted %+v", args, o)
		}
		if o.clusterState != "" && o.clusterState != "new" && o.clusterState != "existing" {
			t.Fatalf("%q: accepted --initial-cluster-state %q", args, o.clusterState)
		}
		if net.ParseIP(o.host) == nil && o.host != "localhost" {
			t.Fatalf("%q: accepted host %q", args, o.host)
		}
		if len(o.members) > 0 {
			self, ok := o.members[o.nodeID]
			if !ok {
				t.Fatalf("%q: node %d not among the members %v", args, o.nodeID, o.members)
			}
			if self.RaftAddress != net.JoinHostPort(o.raftHost, strconv.Itoa(o.raftPort)) {
				t.Fatalf("%q: own Raft address %q vs --raft-host/--raft-port", args, self.RaftAddress)
			}
			for id, m := range o.members {
				if id == 0 || m.Endpoint == "" {
					t.Fatalf("%q: member %d %+v", args, id, m)
				}
				if _, _, err := net.SplitHostPort(m.RaftAddress); err != nil {
					t.Fatalf("%q: member %d Raft address %q", args, id, m.RaftAddress)
				}
			}
		}
	})
}
