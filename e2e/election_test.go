package e2e

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
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
	bin := build(t)
	t.Run("Nemesis", func(t *testing.T) {
		cand := buildTagged(t, "", "./e2e/electioncandidate")
		r := electionPauseRun(t, bin, cand)
		t.Logf("%s", r)
		if r.leaderPauses == 0 || r.acted < 5 {
			t.Errorf("the run tested too little: %s", r)
		}
		for _, v := range r.violations {
			t.Error(v)
		}
	})
	// A candidate whose leadership ignores its deadline (ends only when an
	// answer says the lease is gone) acts when it wakes, while its
	// successor leads: the run must find two leaders.
	t.Run("NegativeControl", func(t *testing.T) {
		cand := buildTagged(t, "kahuna_unsafe", "./e2e/electioncandidate")
		cand.env = []string{"KAHUNA_UNSAFE=no-deadline"}
		r := electionPauseRun(t, bin, cand)
		t.Logf("%s", r)
		for _, v := range r.violations {
			if v.Kind == "two-leaders" {
				t.Logf("caught: %v", v)
				return
			}
		}
		t.Errorf("a leadership that ignores its deadline was not caught: %s", r)
	})
}

type electionPauseResult struct {
	terms, acted                          int
	leaderPauses, otherPauses, nodePauses int
	violations                            []checker.Violation
}

func (r electionPauseResult) String() string {
	return fmt.Sprintf("%d terms (%d acted); paused the leading candidate %d times, a waiting one %d, the partition's leader node %d; %d violations",
		r.terms, r.acted, r.leaderPauses, r.otherPauses, r.nodePauses, len(r.violations))
}

// candidateProc is one candidate process.
type candidateProc struct {
	id     int
	cmd    *exec.Cmd
	out    string
	done   chan struct{}
	stderr *syncBuffer
}

func electionPauseRun(t *testing.T, bin, cand binaries) electionPauseResult {
	c := startPauseCluster(t, bin)
	name := "e2e-jobs"
	p := partition.Of(kahuna.ElectionPrefix+name, clusterPartitions)
	dir := t.TempDir()
	cands := make([]*candidateProc, 3)
	for i := range cands {
		cp := &candidateProc{id: i, out: filepath.Join(dir, fmt.Sprintf("terms-%d", i)), done: make(chan struct{})}
		cp.cmd = exec.Command(filepath.Join(filepath.Dir(cand.kahuna), "electioncandidate"),
			"-endpoints", strings.Join(c.endpoints(), ","), "-name", name, "-id", strconv.Itoa(i),
			"-ttl", e2eElectionTTL.String(), "-out", cp.out)
		cp.cmd.Env = append(procEnv(), cand.env...)
		stderr := newSyncBuffer("")
		cp.stderr = stderr
		cp.cmd.Stderr = stderr
		if err := cp.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { _ = cp.cmd.Wait(); close(cp.done) }()
		t.Cleanup(func() {
			_ = cp.cmd.Process.Signal(syscall.SIGCONT)
			_ = cp.cmd.Process.Kill()
			<-cp.done
		})
		cands[i] = cp
	}

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

	var r electionPauseResult
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0xe2e))
	for end := time.Now().Add(e2eElectionRound); time.Now().Before(end); {
		time.Sleep(time.Duration(300+rng.IntN(700)) * time.Millisecond)
		pause := e2eElectionTTL + time.Duration(rng.Int64N(int64(2*e2eElectionTTL)))
		switch k := rng.IntN(10); {
		case k < 7: // the leading candidate
			id := leading()
			if id < 0 {
				continue
			}
			r.leaderPauses++
			freeze(t, cands[id].cmd.Process, pause)
		case k < 9:
			r.otherPauses++
			freeze(t, cands[rng.IntN(len(cands))].cmd.Process, pause)
		default: // the node that leads the partition
			id := c.servingLeader(p, c.ids)
			if id == 0 {
				continue
			}
			r.nodePauses++
			c.stop(id)
			time.Sleep(pause)
			c.cont(id)
		}
	}
	for _, cp := range cands {
		_ = cp.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, cp := range cands {
		select {
		case <-cp.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("candidate %d did not exit after SIGTERM", cp.id)
		}
		if code := cp.cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("candidate %d exited %d", cp.id, code)
		}
	}
	var terms []checker.Term
	for _, cp := range cands {
		terms = append(terms, readTerms(t, cp.out)...)
	}
	r.terms = len(terms)
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
		for _, cp := range cands {
			t.Logf("candidate %d stderr (instants from %d):\n%s", cp.id, base, cp.stderr.String())
		}
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
