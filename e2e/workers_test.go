package e2e

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kahunago/kahuna/checker"
)

// The process-level recipe tests (election, sessions) run three worker
// processes of one command against a pause cluster, freeze them and the
// nodes with SIGSTOP, and read what each worker wrote to its out file.

// workerProc is one worker process.
type workerProc struct {
	id     int
	cmd    *exec.Cmd
	out    string // the file prefix it writes to (-out)
	done   chan struct{}
	stderr *syncBuffer
}

// startWorkers starts n processes of command (built into bin's
// directory) with args plus -id I and -out OUT, each OUT in dir, and
// calls line, if set, with every line a worker prints on stdout. The
// workers are killed when t ends, if still running.
func startWorkers(t *testing.T, bin binaries, command string, n int, args []string, dir string, line func(id int, text string)) []*workerProc {
	t.Helper()
	procs := make([]*workerProc, n)
	for i := range procs {
		wp := &workerProc{id: i, out: filepath.Join(dir, command+"-"+strconv.Itoa(i)), done: make(chan struct{}), stderr: newSyncBuffer("")}
		wp.cmd = exec.Command(filepath.Join(filepath.Dir(bin.kahuna), command), append(args, "-id", strconv.Itoa(i), "-out", wp.out)...)
		wp.cmd.Env = append(procEnv(), bin.env...)
		wp.cmd.Stderr = wp.stderr
		stdout, err := wp.cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := wp.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		read := make(chan struct{})
		go func() {
			defer close(read)
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				if line != nil {
					line(i, sc.Text())
				}
			}
		}()
		go func() { <-read; _ = wp.cmd.Wait(); close(wp.done) }()
		t.Cleanup(func() {
			_ = wp.cmd.Process.Signal(syscall.SIGCONT)
			_ = wp.cmd.Process.Kill()
			<-wp.done
		})
		procs[i] = wp
	}
	return procs
}

// stopWorkers sends every worker SIGTERM and fails t unless each exits 0
// within 30 s.
func stopWorkers(t *testing.T, procs []*workerProc) {
	t.Helper()
	for _, wp := range procs {
		_ = wp.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, wp := range procs {
		select {
		case <-wp.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("worker %d did not exit after SIGTERM", wp.id)
		}
		if code := wp.cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("worker %d exited %d", wp.id, code)
		}
	}
}

// pauses counts what pauseWorkers froze.
type pauses struct{ leading, other, node int }

// pauseWorkers is the nemesis, for round: every 0.3–1 s it freezes, for
// one to three ttls, the worker that leads or holds now (leading, -1 for
// none) 70% of the time, a random worker 20%, or 10% the node that
// serves the partition partition() picks, and resumes it.
func pauseWorkers(t *testing.T, c *pauseCluster, procs []*workerProc, round, ttl time.Duration, leading func() int, partition func() int) pauses {
	t.Helper()
	var n pauses
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0xe2e))
	for end := time.Now().Add(round); time.Now().Before(end); {
		time.Sleep(time.Duration(300+rng.IntN(700)) * time.Millisecond)
		pause := ttl + time.Duration(rng.Int64N(int64(2*ttl)))
		switch k := rng.IntN(10); {
		case k < 7:
			id := leading()
			if id < 0 {
				continue
			}
			n.leading++
			freeze(t, procs[id].cmd.Process, pause)
		case k < 9:
			n.other++
			freeze(t, procs[rng.IntN(len(procs))].cmd.Process, pause)
		default:
			id := c.servingLeader(partition(), c.ids)
			if id == 0 {
				continue
			}
			n.node++
			c.stop(id)
			time.Sleep(pause)
			c.cont(id)
		}
	}
	return n
}

// stderrs logs every worker's stderr.
func stderrs(t *testing.T, procs []*workerProc) {
	t.Helper()
	for _, wp := range procs {
		t.Logf("worker %d stderr:\n%s", wp.id, wp.stderr.String())
	}
}

// workerArgs is the common flags of the workers: the cluster's endpoints
// and more.
func workerArgs(c *pauseCluster, more ...string) []string {
	return append([]string{"-endpoints", strings.Join(c.endpoints(), ",")}, more...)
}

// workerPauseResult is what a pause run of workers saw.
type workerPauseResult struct {
	what       string // what runs counts: "terms", "holds"
	runs       int
	acted      int // runs that acted at least once
	pauses     pauses
	violations []checker.Violation
}

func (r workerPauseResult) String() string {
	return fmt.Sprintf("%d %s (%d acted); paused the leading worker %d times, another %d, a partition's leader node %d; %d violations",
		r.runs, r.what, r.acted, r.pauses.leading, r.pauses.other, r.pauses.node, len(r.violations))
}

// pauseTest runs the workers of pkg (an e2e command) through run twice:
// as built, where the run must pause the leading worker, see at least 5
// runs act, and find no violation; and built with KAHUNA_UNSAFE=no-deadline
// (a Lock lost only when an answer says so), where it must find two
// workers acting at once ("two-leaders").
func pauseTest(t *testing.T, pkg string, run func(t *testing.T, bin, worker binaries) workerPauseResult) {
	bin := build(t)
	t.Run("Nemesis", func(t *testing.T) {
		r := run(t, bin, buildTagged(t, "", pkg))
		t.Logf("%s", r)
		if r.pauses.leading == 0 || r.acted < 5 {
			t.Errorf("the run tested too little: %s", r)
		}
		for _, v := range r.violations {
			t.Error(v)
		}
	})
	t.Run("NegativeControl", func(t *testing.T) {
		worker := buildTagged(t, "kahuna_unsafe", pkg)
		worker.env = []string{"KAHUNA_UNSAFE=no-deadline"}
		r := run(t, bin, worker)
		t.Logf("%s", r)
		for _, v := range r.violations {
			if v.Kind == "two-leaders" {
				t.Logf("caught: %v", v)
				return
			}
		}
		t.Errorf("workers whose locks ignore their deadline were not caught: %s", r)
	})
}
