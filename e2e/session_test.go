package e2e

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/checker"
	"github.com/kahunago/kahuna/partition"
)

// Sessions under real process pauses: three holder processes
// (sessionholder) each open a session, take two locks on two partitions
// in it, work on them, close it, and again; the nemesis freezes the
// holder of the locks with SIGSTOP for one to three TTLs, now and then a
// waiting one, or the node that leads a lock's partition, and resumes it
// with SIGCONT. A holder that wakes must not act on a lock once another
// holds it: checker.CheckElection on each lock's holds (two holders at
// once, tokens not rising), on CLOCK_MONOTONIC, which all the processes
// share.
//
//	go test -run TestSessionPauses -v ./e2e

const (
	e2eSessionTTL   = time.Second
	e2eSessionRound = 20 * time.Second
)

// The session's two locks, on two partitions (checked below).
var e2eSessionLocks = []string{"e2e-acct-a/balance", "e2e-acct-b/balance"}

func TestSessionPauses(t *testing.T) {
	if pa, pb := partition.Of(e2eSessionLocks[0], clusterPartitions), partition.Of(e2eSessionLocks[1], clusterPartitions); pa == pb {
		t.Fatalf("the session's locks share partition %d: pick names on two", pa)
	}
	bin := build(t)
	t.Run("Nemesis", func(t *testing.T) {
		holder := buildTagged(t, "", "./e2e/sessionholder")
		r := sessionPauseRun(t, bin, holder)
		t.Logf("%s", r)
		if r.holderPauses == 0 || r.acted < 5 {
			t.Errorf("the run tested too little: %s", r)
		}
		for _, v := range r.violations {
			t.Error(v)
		}
	})
	// Holders whose locks ignore their deadline (end only when an answer
	// says the lease is gone) act when they wake, while the next holder
	// holds: the run must find two holders of a lock at once.
	t.Run("NegativeControl", func(t *testing.T) {
		holder := buildTagged(t, "kahuna_unsafe", "./e2e/sessionholder")
		holder.env = []string{"KAHUNA_UNSAFE=no-deadline"}
		r := sessionPauseRun(t, bin, holder)
		t.Logf("%s", r)
		for _, v := range r.violations {
			if v.Kind == "two-leaders" {
				t.Logf("caught: %v", v)
				return
			}
		}
		t.Errorf("session locks that ignore their deadline were not caught: %s", r)
	})
}

type sessionPauseResult struct {
	holds, acted                          int
	holderPauses, otherPauses, nodePauses int
	violations                            []checker.Violation
}

func (r sessionPauseResult) String() string {
	return fmt.Sprintf("%d holds (%d acted); paused the holder %d times, another %d, a lock's leader node %d; %d violations",
		r.holds, r.acted, r.holderPauses, r.otherPauses, r.nodePauses, len(r.violations))
}

func sessionPauseRun(t *testing.T, bin, holder binaries) sessionPauseResult {
	c := startPauseCluster(t, bin)
	dir := t.TempDir()
	var mu sync.Mutex
	holderOf := map[string]int{} // session ID → holder
	procs := make([]*candidateProc, 3)
	for i := range procs {
		hp := &candidateProc{id: i, out: filepath.Join(dir, fmt.Sprintf("holds-%d", i)), done: make(chan struct{})}
		hp.cmd = exec.Command(filepath.Join(filepath.Dir(holder.kahuna), "sessionholder"),
			"-endpoints", strings.Join(c.endpoints(), ","), "-locks", strings.Join(e2eSessionLocks, ","),
			"-id", strconv.Itoa(i), "-ttl", e2eSessionTTL.String(), "-out", hp.out)
		hp.cmd.Env = append(procEnv(), holder.env...)
		hp.stderr = newSyncBuffer("")
		hp.cmd.Stderr = hp.stderr
		stdout, err := hp.cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := hp.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		read := make(chan struct{})
		go func() {
			defer close(read)
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				if id, ok := strings.CutPrefix(sc.Text(), "session "); ok {
					mu.Lock()
					holderOf[id] = i
					mu.Unlock()
				}
			}
		}()
		go func() { <-read; _ = hp.cmd.Wait(); close(hp.done) }()
		t.Cleanup(func() {
			_ = hp.cmd.Process.Signal(syscall.SIGCONT)
			_ = hp.cmd.Process.Kill()
			<-hp.done
		})
		procs[i] = hp
	}

	client, err := kahuna.Dial(context.Background(), c.endpoints())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	holding := func() int { // the holder of the first lock now, or -1
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		info, r, err := client.Get(ctx, e2eSessionLocks[0], kahuna.Persistent)
		if err != nil || r.Status != kahuna.Got {
			return -1
		}
		mu.Lock()
		defer mu.Unlock()
		if id, ok := holderOf[string(info.Owner)]; ok {
			return id
		}
		return -1
	}

	var r sessionPauseResult
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x5e55))
	for end := time.Now().Add(e2eSessionRound); time.Now().Before(end); {
		time.Sleep(time.Duration(300+rng.IntN(700)) * time.Millisecond)
		pause := e2eSessionTTL + time.Duration(rng.Int64N(int64(2*e2eSessionTTL)))
		switch k := rng.IntN(10); {
		case k < 7:
			id := holding()
			if id < 0 {
				continue
			}
			r.holderPauses++
			freeze(t, procs[id].cmd.Process, pause)
		case k < 9:
			r.otherPauses++
			freeze(t, procs[rng.IntN(len(procs))].cmd.Process, pause)
		default: // the node that leads a lock's partition
			p := partition.Of(e2eSessionLocks[rng.IntN(len(e2eSessionLocks))], clusterPartitions)
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
	for _, hp := range procs {
		_ = hp.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, hp := range procs {
		select {
		case <-hp.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("holder %d did not exit after SIGTERM", hp.id)
		}
		if code := hp.cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("holder %d exited %d", hp.id, code)
		}
	}
	holdsOf := make([][]checker.Term, len(e2eSessionLocks))
	base := time.Duration(-1)
	for lock := range e2eSessionLocks {
		for _, hp := range procs {
			holdsOf[lock] = append(holdsOf[lock], readTerms(t, fmt.Sprintf("%s.%d", hp.out, lock))...)
		}
		for _, h := range holdsOf[lock] {
			if h.Acts > 0 && (base < 0 || h.FirstAct < base) {
				base = h.FirstAct
			}
		}
	}
	for lock, name := range e2eSessionLocks {
		holds := holdsOf[lock]
		r.holds += len(holds)
		for i := range holds {
			if holds[i].Acts > 0 {
				r.acted++
				// Instants from the first act, to read them in a report.
				holds[i].FirstAct -= base
				holds[i].LastAct -= base
			}
		}
		for _, v := range checker.CheckElection(holds, nil) {
			v.Text = name + ": " + v.Text
			r.violations = append(r.violations, v)
		}
	}
	if len(r.violations) > 0 {
		for _, hp := range procs {
			t.Logf("holder %d stderr:\n%s", hp.id, hp.stderr.String())
		}
	}
	return r
}
