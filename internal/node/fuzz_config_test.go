package node

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/kahunago/kahuna/admin"
	"github.com/kahunago/kahuna/durability"
)

// FuzzConfig checks Config validation (withDefaults, the pure part of
// Open) on arbitrary values: it never panics; a config it accepts has its
// defaults filled in and is consistent (this node among the members, every
// member with a Raft address and an http(s) endpoint and a DataDir in a
// cluster, a known InitialClusterState); a config it refuses says why.
//
//	go test -run X -fuzz FuzzConfig -fuzztime 10m .
func FuzzConfig(f *testing.F) {
	f.Add(uint64(0), 0, 0, int64(0), 0, int64(0), "", "", "", "")
	f.Add(uint64(1), 8, 2, int64(time.Minute), 100, int64(time.Second), "/data", "", "1=127.0.0.1:2073=http://127.0.0.1:2070", "existing")
	f.Add(uint64(2), -1, -1, int64(-1), -1, int64(-1), "", "/wal", "1=a:1=http://a:2,2=b:1=ftp://b", "new")
	f.Add(uint64(3), 4, 0, int64(0), 0, int64(0), "/d", "/w", "1=a:1=http://a:2,2=b:1=http://b:2", "new")
	f.Add(uint64(1), 1, 1, int64(0), 0, int64(0), "", "", "0=x:1=http://x:2,1==", "")
	f.Add(uint64(1), 0, 0, int64(0), 0, int64(0), "", "", "1=a:1=http://a:2,2=b:1=http://b:2", "new")
	f.Add(uint64(1), 0, 0, int64(0), 0, int64(0), "", "", "", "existing")
	f.Add(uint64(1), 0, 0, int64(0), 0, int64(0), "/d", "", "", "old")
	f.Fuzz(func(t *testing.T, nodeID uint64, partitions, actors int, cacheTTL int64, remove int, start int64, dataDir, walDir, members, state string) {
		c := Config{
			NodeID: nodeID, Partitions: partitions, LockActors: actors,
			CacheEntryTTL: time.Duration(cacheTTL), CacheEntriesToRemove: remove, StartTimeout: time.Duration(start),
			DataDir: dataDir, WALDir: walDir, InitialClusterState: durability.ClusterState(state),
		}
		// members: "id=raft=endpoint,...".
		if members != "" {
			c.Members = map[uint64]admin.Member{}
			for _, m := range strings.Split(members, ",") {
				parts := strings.SplitN(m, "=", 3)
				var id uint64
				if _, err := fmt.Sscan(parts[0], &id); err != nil {
					continue
				}
				var mem admin.Member
				if len(parts) > 1 {
					mem.RaftAddress = parts[1]
				}
				if len(parts) > 2 {
					mem.Endpoint = parts[2]
				}
				c.Members[id] = mem
			}
		}
		got, err := c.withDefaults()
		if err != nil {
			if !strings.HasPrefix(err.Error(), "kahuna: invalid config: ") {
				t.Fatalf("error without context: %v", err)
			}
			return
		}
		if got.Partitions < 1 || got.LockActors < 1 || got.CacheEntryTTL <= 0 || got.CacheEntriesToRemove < 1 ||
			got.StartTimeout <= 0 || got.NodeID == 0 || got.Clock == nil || got.Logger == nil {
			t.Fatalf("accepted %+v as %+v", c, got)
		}
		if got.WALDir != "" && got.DataDir == "" {
			t.Fatalf("accepted a WALDir without a DataDir: %+v", c)
		}
		if len(got.Members) > 1 && got.DataDir == "" {
			t.Fatalf("accepted an in-memory cluster member: %+v", c)
		}
		switch got.InitialClusterState {
		case "", durability.ClusterStateNew:
		case durability.ClusterStateExisting:
			if got.DataDir == "" {
				t.Fatalf("accepted InitialClusterState existing in memory: %+v", c)
			}
		default:
			t.Fatalf("accepted InitialClusterState %q", got.InitialClusterState)
		}
		if len(got.Members) > 0 {
			self, ok := got.Members[got.NodeID]
			if !ok || got.RaftAddress != self.RaftAddress {
				t.Fatalf("accepted node %d with members %v (RaftAddress %q)", got.NodeID, got.Members, got.RaftAddress)
			}
			for id, m := range got.Members {
				if id == 0 {
					t.Fatalf("accepted member ID 0: %v", got.Members)
				}
				u, err := url.Parse(m.Endpoint)
				if len(got.Members) > 1 && (m.RaftAddress == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "") {
					t.Fatalf("accepted member %d %+v", id, m)
				}
			}
		}
	})
}
