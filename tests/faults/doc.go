// Package faults holds kahuna's fault and safety suites, in its tests
// alone: seeded fault schedules and nemeses against an in-process cluster
// (internal/testcluster) with the histories judged by package checker,
// the negative controls that switch one protection off each and must be
// caught, the handle and election clients under faults, and the scripted
// scenarios of leader changes (stale and deposed leaders, transfers, a
// rolling change of the Raft tick). See docs/testing.md.
//
//	go test -race -count=1 ./tests/faults
package faults
