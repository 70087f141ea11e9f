package main

import (
	"context"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kahunago/kahuna/admin"
	"github.com/kahunago/kahuna/internal/node"
	"github.com/kahunago/kahuna/lease"
)

var (
	ops          = []lease.Op{lease.TryLock, lease.Extend, lease.Unlock, lease.Get}
	durabilities = []lease.Durability{lease.Ephemeral, lease.Persistent}
	statuses     = []lease.Status{lease.Locked, lease.Busy, lease.Extended, lease.Unlocked, lease.Got,
		lease.WaitingForReplication, lease.Errored, lease.InvalidInput, lease.MustRetry,
		lease.LockDoesNotExist, lease.InvalidOwner, lease.Aborted}
	// success is each op's answer when it does what was asked: the only
	// series created before they occur, so a dashboard has a zero to start
	// from. Every other (op, durability, status) appears when it happens.
	success = map[lease.Op]lease.Status{lease.TryLock: lease.Locked, lease.Extend: lease.Extended,
		lease.Unlock: lease.Unlocked, lease.Get: lease.Got}
)

// latencyBuckets span an ephemeral answer (~5 µs) to a slow persistent
// write or a forward that waits out a leader change: 25 µs .. 2.5 s.
var latencyBuckets = []float64{25e-6, 100e-6, 250e-6, 1e-3, 2.5e-3, 10e-3, 25e-3, 100e-3, 250e-3, 1, 2.5}

// cell holds the series of one (op, durability, status).
type cell struct {
	count   prometheus.Counter
	latency prometheus.Observer
}

// metrics exports a node's work to Prometheus. The series of a request are
// created on first use and then found in cells without locks, so observing
// a request allocates nothing.
type metrics struct {
	registry       *prometheus.Registry
	requests       *prometheus.CounterVec
	latency        *prometheus.HistogramVec
	invalid        *prometheus.CounterVec
	forwarded      *prometheus.CounterVec
	forwardLatency prometheus.Histogram
	cells          [4][2][12]atomic.Pointer[cell] // [op][durability][status index]
}

func newMetrics() *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kahuna_requests_total",
			Help: "Lock requests this node answered (its callers' and those forwarded to it), by operation, durability and status.",
		}, []string{"op", "durability", "status"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kahuna_request_duration_seconds",
			Help:    "Time this node took to answer a lock request, forwarding included, by operation, durability and status.",
			Buckets: latencyBuckets,
		}, []string{"op", "durability", "status"}),
		invalid: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kahuna_invalid_requests_total",
			Help: "Lock requests the API refused as InvalidInput before they reached the node, by operation.",
		}, []string{"op"}),
		forwarded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kahuna_forwarded_requests_total",
			Help: "Lock requests forwarded to the partition's leader (direction sent) or from a peer (received), by status.",
		}, []string{"direction", "status"}),
		forwardLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kahuna_forward_duration_seconds",
			Help:    "Time to answer a lock request this node forwarded to the partition's leader.",
			Buckets: latencyBuckets,
		}),
	}
	for _, op := range ops {
		for _, d := range durabilities {
			m.cell(op, d, success[op])
		}
	}
	m.registry.MustRegister(m.requests, m.latency, m.invalid, m.forwarded, m.forwardLatency,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildInfo())
	return m
}

// watch adds the node's scrape-time metrics.
func (m *metrics) watch(node *node.Node) { m.registry.MustRegister(&nodeCollector{node: node}) }

// cell returns the series of (op, d, st), creating them on first use; nil
// for values outside the known ones (served by the slow path).
func (m *metrics) cell(op lease.Op, d lease.Durability, st lease.Status) *cell {
	si := statusIndex(st)
	if int(op) >= len(m.cells) || d < 0 || int(d) >= len(m.cells[0]) || si < 0 {
		return nil
	}
	p := &m.cells[op][d][si]
	if c := p.Load(); c != nil {
		return c
	}
	labels := []string{op.String(), durabilityLabel(d), st.String()}
	c := &cell{count: m.requests.WithLabelValues(labels...), latency: m.latency.WithLabelValues(labels...)}
	if !p.CompareAndSwap(nil, c) {
		return p.Load()
	}
	return c
}

// durabilityLabel spells d as kahuna_held_locks does: ephemeral, persistent.
func durabilityLabel(d lease.Durability) string { return strings.ToLower(d.String()) }

func statusIndex(st lease.Status) int {
	for i, s := range statuses {
		if s == st {
			return i
		}
	}
	return -1
}

// observeRequest is the node's Config.Observe.
func (m *metrics) observeRequest(ev admin.RequestEvent) {
	secs := ev.Latency.Seconds()
	if c := m.cell(ev.Op, ev.Durability, ev.Status); c != nil {
		c.count.Inc()
		c.latency.Observe(secs)
	} else {
		labels := []string{ev.Op.String(), durabilityLabel(ev.Durability), ev.Status.String()}
		m.requests.WithLabelValues(labels...).Inc()
		m.latency.WithLabelValues(labels...).Observe(secs)
	}
	switch {
	case ev.ForwardedTo != 0:
		m.forwarded.WithLabelValues("sent", ev.Status.String()).Inc()
		m.forwardLatency.Observe(secs)
	case ev.Forwarded:
		m.forwarded.WithLabelValues("received", ev.Status.String()).Inc()
	}
}

// observeWire is the transport's per-request hook. The node sees (and
// counts) every request the API passes to it; the API itself answers only
// the malformed ones, InvalidInput, which the node never sees.
func (m *metrics) observeWire(op lease.Op, st lease.Status) {
	if st == lease.InvalidInput {
		m.invalid.WithLabelValues(op.String()).Inc()
	}
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

// buildInfo is kahuna_build_info: constant 1, labelled with the module
// version, VCS revision and Go version the binary was built from.
func buildInfo() prometheus.Collector {
	version, revision, goVersion := "(devel)", "unknown", "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		goVersion = bi.GoVersion
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				revision = s.Value
			}
		}
	}
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "kahuna_build_info",
		Help:        "Constant 1, labelled with the version, VCS revision and Go version of this binary.",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision, "goversion": goVersion},
	}, func() float64 { return 1 })
}

// nodeCollector reads the node's counters at scrape time.
type nodeCollector struct{ node *node.Node }

var (
	heldDesc          = prometheus.NewDesc("kahuna_held_locks", "Live leases served by this node.", []string{"durability"}, nil)
	cachedDesc        = prometheus.NewDesc("kahuna_cached_entries", "Lock entries cached by the lock actors.", nil, nil)
	evictionsDesc     = prometheus.NewDesc("kahuna_cache_evictions_total", "Idle cache entries evicted.", nil, nil)
	proposalsDesc     = prometheus.NewDesc("kahuna_raft_proposals_total", "Raft entries proposed (each carries a group of lock writes).", nil, nil)
	recordsDesc       = prometheus.NewDesc("kahuna_raft_records_total", "Persistent lock writes committed and applied.", nil, nil)
	failuresDesc      = prometheus.NewDesc("kahuna_raft_failures_total", "Persistent lock writes proposed but not applied.", nil, nil)
	raftWaitDesc      = prometheus.NewDesc("kahuna_raft_wait_seconds_total", "Time Raft entries waited to be proposed (the partition had its most in flight), from each entry's first write, summed; divided by kahuna_raft_proposals_total: the mean.", nil, nil)
	raftCommitDesc    = prometheus.NewDesc("kahuna_raft_commit_seconds_total", "Time from proposing a Raft entry to its outcome (append and fsync, commit, apply), summed; divided by kahuna_raft_proposals_total: the mean.", nil, nil)
	leaderMovesDesc   = prometheus.NewDesc("kahuna_leader_balance_moves_total", "Partitions this node's leader balancing handed to another member since it started.", nil, nil)
	noSpaceDesc       = prometheus.NewDesc("kahuna_disk_quota_exceeded", "1 while this node refuses new persistent locks for want of disk space (--disk-reserve, --store-quota), else 0.", nil, nil)
	diskFreeDesc      = prometheus.NewDesc("kahuna_disk_free_bytes", "Free bytes on the data dir's file system (the least over the data and WAL dirs), as last measured.", nil, nil)
	storeBytesDesc    = prometheus.NewDesc("kahuna_store_bytes", "Bytes the data and WAL dirs hold, as last measured.", nil, nil)
	sweptDesc         = prometheus.NewDesc("kahuna_records_swept_total", "Free persistent lock records this node removed after --released-retention.", nil, nil)
	leaderDesc        = prometheus.NewDesc("kahuna_partition_leader", "Node ID of the partition's leader as this node last heard (0: none known).", []string{"partition"}, nil)
	termDesc          = prometheus.NewDesc("kahuna_partition_term", "Raft term of the partition's leader as this node last heard.", []string{"partition"}, nil)
	servingDesc       = prometheus.NewDesc("kahuna_partition_serving", "1 if this node answers for the partition now (leader with a live lease), else 0.", []string{"partition"}, nil)
	leaderChangesDesc = prometheus.NewDesc("kahuna_partition_leader_changes_total", "New leaders of the partition this node heard of since it started.", []string{"partition"}, nil)
	peerUpDesc        = prometheus.NewDesc("kahuna_peer_up", "1 if this node's Raft connection to the peer is up, else 0 (down, or not tried yet).", []string{"peer"}, nil)
)

func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{heldDesc, cachedDesc, evictionsDesc, proposalsDesc, recordsDesc, failuresDesc, raftWaitDesc, raftCommitDesc, leaderMovesDesc,
		sweptDesc, noSpaceDesc, diskFreeDesc, storeBytesDesc, leaderDesc, termDesc, servingDesc, leaderChangesDesc, peerUpDesc} {
		ch <- d
	}
}

func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.node.Stats()
	ch <- prometheus.MustNewConstMetric(cachedDesc, prometheus.GaugeValue, float64(s.CachedEntries))
	ch <- prometheus.MustNewConstMetric(evictionsDesc, prometheus.CounterValue, float64(s.Evictions))
	ch <- prometheus.MustNewConstMetric(proposalsDesc, prometheus.CounterValue, float64(s.RaftProposals))
	ch <- prometheus.MustNewConstMetric(recordsDesc, prometheus.CounterValue, float64(s.RaftRecords))
	ch <- prometheus.MustNewConstMetric(failuresDesc, prometheus.CounterValue, float64(s.RaftFailures))
	ch <- prometheus.MustNewConstMetric(raftWaitDesc, prometheus.CounterValue, s.RaftWait.Seconds())
	ch <- prometheus.MustNewConstMetric(raftCommitDesc, prometheus.CounterValue, s.RaftCommit.Seconds())
	ch <- prometheus.MustNewConstMetric(leaderMovesDesc, prometheus.CounterValue, float64(s.LeaderMoves))
	ch <- prometheus.MustNewConstMetric(sweptDesc, prometheus.CounterValue, float64(s.RecordsSwept))
	ch <- prometheus.MustNewConstMetric(noSpaceDesc, prometheus.GaugeValue, boolValue(s.NoSpace != ""))
	ch <- prometheus.MustNewConstMetric(diskFreeDesc, prometheus.GaugeValue, float64(s.DiskFree))
	ch <- prometheus.MustNewConstMetric(storeBytesDesc, prometheus.GaugeValue, float64(s.StoreBytes))
	for _, p := range c.node.PartitionStats() {
		label := strconv.Itoa(p.Partition)
		ch <- prometheus.MustNewConstMetric(leaderDesc, prometheus.GaugeValue, float64(p.Leader), label)
		ch <- prometheus.MustNewConstMetric(termDesc, prometheus.GaugeValue, float64(p.Term), label)
		ch <- prometheus.MustNewConstMetric(servingDesc, prometheus.GaugeValue, boolValue(p.Serving), label)
		ch <- prometheus.MustNewConstMetric(leaderChangesDesc, prometheus.CounterValue, float64(p.LeaderChanges), label)
	}
	for _, p := range c.node.PeerStats() {
		ch <- prometheus.MustNewConstMetric(peerUpDesc, prometheus.GaugeValue, boolValue(p.Reachable), strconv.FormatUint(p.ID, 10))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if e, p, err := c.node.HeldLocks(ctx); err == nil {
		ch <- prometheus.MustNewConstMetric(heldDesc, prometheus.GaugeValue, float64(e), "ephemeral")
		ch <- prometheus.MustNewConstMetric(heldDesc, prometheus.GaugeValue, float64(p), "persistent")
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
