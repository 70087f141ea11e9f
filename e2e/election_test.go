package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/checker"
	"github.com/kahunago/kahuna/partition"
)

// Leader election under real process pauses: three candidate processes
// (electioncandidate) campaign on a three-process cluster and lead in
// turn, acting in a loop; the nemesis freezes the leading candidate's
// process with SIGSTOP for one to three TTLs (a GC pause, a VM freeze:
// its clock runs, its goroutines do not), now and then a waiting one, or
// the node that leads the election's partition, and resumes it with
// SIGCONT. A candidate that wakes must not act as leader once another has
// been elected: checker.CheckElection on every term, on the machine's
// CLOCK_MONOTONIC, which all the processes share.
//
//	go test -run TestElectionPauses -v ./e2e

const (
	e2eElectionTTL   = time.Second
	e2eElectionRound = 20 * time.Second
)

func TestElectionPauses(t *testing.T) {
	t.Parallel()
	pauseTest(t, "./e2e/electioncandidate", electionPauseRun)
}

func electionPauseRun(t *testing.T, bin, cand binaries) workerPauseResult {
	c := startPauseCluster(t, bin)
	name := "e2e-jobs"
	p := partition.Of(kahuna.ElectionPrefix+name, clusterPartitions)
	cands := startWorkers(t, cand, "electioncandidate", 3,
		workerArgs(c, "-name", name, "-ttl", e2eElectionTTL.String()), t.TempDir(), nil)

	client, err := kahuna.Dial(context.Background(), c.endpoints())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	leading := func() int { // the candidate that leads now, or -1
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		info, err := kahuna.Leader(ctx, client, name)
		if err != nil {
			return -1
		}
		var id, round int
		if _, err := fmt.Sscanf(string(info.Value), "cand-%d-%d", &id, &round); err != nil {
			return -1
		}
		return id
	}
	r := workerPauseResult{what: "terms"}
	r.pauses = pauseWorkers(t, c, cands, e2eElectionRound, e2eElectionTTL, leading, func() int { return p })
	stopWorkers(t, cands)
	var terms []checker.Term
	for _, cp := range cands {
		terms = append(terms, readTerms(t, cp.out)...)
	}
	r.runs = len(terms)
	var base int64 = -1
	for _, term := range terms {
		if term.Acts > 0 {
			r.acted++
			if base < 0 || int64(term.FirstAct) < base {
				base = int64(term.FirstAct)
			}
		}
	}
	// Instants from the first act, to read them in a report.
	for i := range terms {
		if terms[i].Acts > 0 {
			terms[i].FirstAct -= time.Duration(base)
			terms[i].LastAct -= time.Duration(base)
		}
	}
	r.violations = checker.CheckElection(terms, nil)
	if len(r.violations) > 0 {
		t.Logf("instants from %d", base)
		stderrs(t, cands)
	}
	return r
}

// freeze stops a process for d, as SIGSTOP does, then resumes it.
func freeze(t *testing.T, p *os.Process, d time.Duration) {
	t.Helper()
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP: %v", err)
	}
	time.Sleep(d)
	if err := p.Signal(syscall.SIGCONT); err != nil {
		t.Fatalf("SIGCONT: %v", err)
	}
}

// readTerms reads a candidate's terms file.
func readTerms(t *testing.T, path string) []checker.Term {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var terms []checker.Term
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var (
			term        checker.Term
			first, last int64
			acts        int
		)
		if _, err := fmt.Sscanf(sc.Text(), "%d %s %d %d %d %d", &term.Candidate, &term.Value, &term.Epoch, &first, &last, &acts); err != nil {
			t.Fatalf("%s: %q: %v", path, sc.Text(), err)
		}
		term.FirstAct, term.LastAct, term.Acts = time.Duration(first), time.Duration(last), acts
		terms = append(terms, term)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return terms
}
