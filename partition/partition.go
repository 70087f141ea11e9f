// Package partition maps resources to partitions and decides whether this
// node may serve a partition now: only as its Raft leader, and only after a
// read barrier and a purge of the actors' cached entries of it.
package partition

import (
	"hash/fnv"

	"github.com/kahunago/kahuna/lease"
)

// Of returns the partition of resource among n partitions. Like Kahuna it
// hashes the part before the last '/', so "tenant/a/x" and "tenant/a/y"
// share a partition; a name without '/' hashes whole. The hash is stable
// across processes and versions: it decides where persistent locks live.
func Of(resource string, n int) int {
	if n == 1 {
		return 0 // what jump answers for one partition, without hashing the name
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(lease.PartitionKey(resource)))
	return jump(h.Sum64(), n)
}

// jump is Lamping and Veach's jump consistent hash: growing n moves only
// 1/n of the keys.
func jump(key uint64, n int) int {
	var b, j int64 = -1, 0
	for j < int64(n) {
		b = j
		key = key*2862933555777941757 + 1
		j = int64(float64(b+1) * (float64(int64(1)<<31) / float64((key>>33)+1)))
	}
	return int(b)
}
