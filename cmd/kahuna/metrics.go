package main

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/lease"
)

var (
	ops      = []lease.Op{lease.TryLock, lease.Extend, lease.Unlock, lease.Get}
	statuses = []lease.Status{lease.Locked, lease.Busy, lease.Extended, lease.Unlocked, lease.Got,
		lease.WaitingForReplication, lease.Errored, lease.InvalidInput, lease.MustRetry,
		lease.LockDoesNotExist, lease.InvalidOwner, lease.Aborted}
)

// metrics exports a node's work to Prometheus. Request observers are
// resolved once per (op, status), so observing a request allocates nothing.
type metrics struct {
	registry  *prometheus.Registry
	requests  map[[2]int32]prometheus.Counter
	latencies map[[2]int32]prometheus.Observer
}

func newMetrics(node *kahuna.Node) *metrics {
	m := &metrics{
		registry:  prometheus.NewRegistry(),
		requests:  map[[2]int32]prometheus.Counter{},
		latencies: map[[2]int32]prometheus.Observer{},
	}
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kahuna_requests_total", Help: "Lock requests served, by operation and status.",
	}, []string{"op", "status"})
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "kahuna_request_duration_seconds",
		Help:    "Time to serve a lock request, by operation and status.",
		Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16), // 50µs .. 1.6s
	}, []string{"op", "status"})
	for _, op := range ops {
		for _, st := range statuses {
			k := [2]int32{int32(op), int32(st)}
			m.requests[k] = requests.WithLabelValues(op.String(), st.String())
			m.latencies[k] = latency.WithLabelValues(op.String(), st.String())
		}
	}
	m.registry.MustRegister(requests, latency, &nodeCollector{node: node},
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return m
}

// observe is the transport's per-request hook.
func (m *metrics) observe(op lease.Op, st lease.Status, d time.Duration) {
	k := [2]int32{int32(op), int32(st)}
	if c, ok := m.requests[k]; ok {
		c.Inc()
		m.latencies[k].Observe(d.Seconds())
	}
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

// nodeCollector reads the node's counters at scrape time.
type nodeCollector struct{ node *kahuna.Node }

var (
	heldDesc      = prometheus.NewDesc("kahuna_held_locks", "Live leases served by this node.", []string{"durability"}, nil)
	cachedDesc    = prometheus.NewDesc("kahuna_cached_entries", "Lock entries cached by the lock actors.", nil, nil)
	evictionsDesc = prometheus.NewDesc("kahuna_cache_evictions_total", "Idle cache entries evicted.", nil, nil)
	proposalsDesc = prometheus.NewDesc("kahuna_raft_proposals_total", "Raft entries proposed (each carries a group of lock writes).", nil, nil)
	recordsDesc   = prometheus.NewDesc("kahuna_raft_records_total", "Persistent lock writes committed and applied.", nil, nil)
	failuresDesc  = prometheus.NewDesc("kahuna_raft_failures_total", "Persistent lock writes proposed but not applied.", nil, nil)
)

func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{heldDesc, cachedDesc, evictionsDesc, proposalsDesc, recordsDesc, failuresDesc} {
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
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if e, p, err := c.node.HeldLocks(ctx); err == nil {
		ch <- prometheus.MustNewConstMetric(heldDesc, prometheus.GaugeValue, float64(e), "ephemeral")
		ch <- prometheus.MustNewConstMetric(heldDesc, prometheus.GaugeValue, float64(p), "persistent")
	}
}
