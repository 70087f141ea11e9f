package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
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
	t.Parallel()
	if pa, pb := partition.Of(e2eSessionLocks[0], clusterPartitions), partition.Of(e2eSessionLocks[1], clusterPartitions); pa == pb {
		t.Fatalf("the session's locks share partition %d: pick names on two", pa)
	}
	pauseTest(t, "./e2e/sessionholder", sessionPauseRun)
}

func sessionPauseRun(t *testing.T, bin, holder binaries) workerPauseResult {
	c := startPauseCluster(t, bin)
	var mu sync.Mutex
	holderOf := map[string]int{} // session ID → holder
	procs := startWorkers(t, holder, "sessionholder", 3,
		workerArgs(c, "-locks", strings.Join(e2eSessionLocks, ","), "-ttl", e2eSessionTTL.String()), t.TempDir(),
		func(id int, text string) {
			if sid, ok := strings.CutPrefix(text, "session "); ok {
				mu.Lock()
				holderOf[sid] = id
				mu.Unlock()
			}
		})

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
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x5e55))
	r := workerPauseResult{what: "holds"}
	r.pauses = pauseWorkers(t, c, procs, e2eSessionRound, e2eSessionTTL, holding, func() int {
		return partition.Of(e2eSessionLocks[rng.IntN(len(e2eSessionLocks))], clusterPartitions)
	})
	stopWorkers(t, procs)
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
		r.runs += len(holds)
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
		stderrs(t, procs)
	}
	return r
}
