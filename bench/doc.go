// Package bench is the engine of kahuna-bench: it drives a lock service
// (a Target) with a workload under a closed or open load model and reports
// HdrHistogram latencies, in Kahuna's kahuna-bench vocabulary so numbers
// sit next to those of kahuna-bench, etcd's benchmark and redis-benchmark.
//
// The pieces, one job per file:
//
//	target*.go      what can be benchmarked: a registry of Targets; each opens
//	                a System that hands every worker a lease.Locker
//	workload.go     what one operation is (lock, hot, extend, get, mixed);
//	                handoff.go the hot workload's handoff latency
//	hotwait.go      the hot-wait workload: acquire with a wait (on the
//	                service for a lease.WaitLocker, else polled), fairness
//	                (Jain) and requests per grant
//	schedule.go     when operations start: closed loop or open loop at --rate
//	worker.go       one caller; timeout.go its per-operation timeout
//	recorder.go     where samples go: striped HDR histograms and counters
//	run.go          one target, warmup then measurement
//	summary.go      histograms to the numbers of a report
//	report*.go      console, JSON and CSV; compare.go the side-by-side table
//	plot.go         the latency percentile chart
//	config.go       the settings and their checks; flags.go the command line
//	main.go         Main, shared by cmd/kahuna-bench and the peers' command
//
// Counting rules (as Kahuna's kahuna-bench): an operation that gets its
// answer is a success and its latency is recorded; a refused TryLock (Busy)
// is a miss, counted but not an error and not in the latency; a call that
// fails (transport, unexpected status) is an error; one that runs past
// --timeout is a timeout. ops/s counts successes.
package bench
