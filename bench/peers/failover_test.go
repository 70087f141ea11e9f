package peers

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestMain: the test binary is also the failover benchmark's candidate
// (it re-executes itself as "candidate ...").
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "candidate" {
		os.Exit(FailoverCandidate(context.Background(), os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	}
	if len(os.Args) > 2 && os.Args[1] == "fake-candidate" {
		// A leader whose deadline is os.Args[2] from now: elected at once,
		// it renews nothing and lives until killed (or stdin closes).
		d, err := time.ParseDuration(os.Args[2])
		if err != nil {
			os.Exit(2)
		}
		now := time.Now()
		fmt.Printf("elected 1 %d %d\n", now.UnixNano(), now.Add(d).UnixNano())
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// buildKahuna builds cmd/kahuna from the module root into a temp dir, with
// -race when this test runs with -race (so the build reuses what the root
// module's race tests compiled).
func buildKahuna(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("skipped: no go command to build cmd/kahuna: %v", err)
	}
	out := filepath.Join(t.TempDir(), "kahuna")
	args := []string{"build", "-o", out}
	if raceEnabled {
		args = append(args, "-race")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool, append(args, "./cmd/kahuna")...)
	cmd.Dir = filepath.Join("..", "..")
	start := time.Now()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s ./cmd/kahuna: %v\n%s", strings.Join(args, " "), err, b)
	}
	t.Logf("built cmd/kahuna (race=%v) in %v", raceEnabled, time.Since(start).Round(time.Millisecond))
	return out
}

// The failover benchmark runs two rounds per system (the three at once,
// so timings here say nothing): each kills its leader child and
// elects the waiting parent, with rising terms, and every killed kahuna
// leader's last deadline precedes its successor's election.
func TestFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped in -short: starts servers and candidate processes")
	}
	needServer(t, "etcd")
	kahunaBin := buildKahuna(t)
	var wg sync.WaitGroup // the three at once, whatever -parallel says
	defer wg.Wait()
	for _, system := range []string{"kahuna:persistent", "kahuna:ephemeral", "etcd"} {
		wg.Go(func() {
			t.Run(system, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				var progress strings.Builder
				res := RunFailover(ctx, FailoverConfig{
					Systems: []string{system}, Rounds: 2, KahunaServer: kahunaBin, EtcdServer: "etcd",
					Candidate: []string{os.Args[0], "candidate"}, Seed: 1, Progress: &progress, Logf: t.Logf,
				})
				var table strings.Builder
				PrintFailover(&table, FailoverTTL, res)
				t.Log("\n" + progress.String() + "\n" + table.String())
				if len(res) != 1 {
					t.Fatalf("%d results", len(res))
				}
				r := res[0]
				if r.Err != nil {
					t.Fatal(r.Err)
				}
				if len(r.Rounds) != 2 || r.Failed() != 0 {
					t.Fatalf("%d rounds, %d failed", len(r.Rounds), r.Failed())
				}
				for i, rd := range r.Rounds {
					if rd.Failover <= 0 || rd.Failover > 3*FailoverTTL || rd.NewEpoch <= rd.OldEpoch {
						t.Errorf("round %d: failover %v, term %d -> %d", i, rd.Failover, rd.OldEpoch, rd.NewEpoch)
					}
					if r.Deadlines != (rd.Deadlines > 0) || (r.Deadlines && !rd.DeadlineBefore()) {
						t.Errorf("round %d: %d deadlines, last %v, elected %v", i, rd.Deadlines, rd.LastDeadline, rd.Elected)
					}
				}
				if want := strings.Replace(system, ":", ", ", 1) + " | 2 | 0 |"; !strings.Contains(table.String(), want) {
					t.Errorf("table lacks %q", want)
				}
			})
		})
	}
}

// A system that cannot be set up fails, and says so: an unknown one, one
// with no candidate command; a candidate with a bad system exits 1.
func TestFailoverFailures(t *testing.T) {
	res := RunFailover(context.Background(), FailoverConfig{Systems: []string{"zookeeper"}, Rounds: 1, Candidate: []string{os.Args[0], "candidate"}})
	if len(res) != 1 || res[0].Err == nil {
		t.Fatalf("unknown system: %+v", res)
	}
	if res := RunFailover(context.Background(), FailoverConfig{Systems: []string{"etcd"}, Rounds: 1}); len(res) != 1 || res[0].Err == nil {
		t.Fatalf("no candidate command: %+v", res)
	}
	var table strings.Builder
	PrintFailover(&table, FailoverTTL, res)
	if !strings.Contains(table.String(), "FAILED") {
		t.Errorf("table:\n%s", table.String())
	}
	if code := FailoverCandidate(context.Background(), []string{"--system", "nope"}, strings.NewReader(""), &strings.Builder{}, &strings.Builder{}); code != 1 {
		t.Errorf("bad system: exit %d", code)
	}
}

// fakeElectorate's parent candidate is elected after delay (or when its
// context ends, if delay is negative) with epoch 2.
type fakeElectorate struct{ delay time.Duration }

func (f fakeElectorate) args() []string { return nil }
func (f fakeElectorate) close() error   { return nil }
func (f fakeElectorate) candidate(context.Context) (waiter, error) {
	return f, nil
}
func (f fakeElectorate) campaign(ctx context.Context) (int64, error) {
	if f.delay < 0 {
		<-ctx.Done()
		return 0, ctx.Err()
	}
	time.Sleep(f.delay)
	return 2, nil
}
func (f fakeElectorate) resign(context.Context) error { return nil }

// Each check of a round catches what it is for: a successor elected while
// the leader lives, no election within the bound, a killed leader whose
// deadline was still ahead at the new election, a candidate that dies.
func TestFailoverRoundChecks(t *testing.T) {
	self := os.Args[0]
	cfg := FailoverConfig{Bound: 300 * time.Millisecond}
	for _, c := range []struct {
		name      string
		candidate []string
		sys       fakeElectorate
		kill      time.Duration
		want      string
	}{
		{"ok", []string{self, "fake-candidate", "1ms"}, fakeElectorate{150 * time.Millisecond}, 50 * time.Millisecond, ""},
		{"elected while the leader lives", []string{self, "fake-candidate", "1ms"}, fakeElectorate{0}, 200 * time.Millisecond, "while the leader"},
		{"no election", []string{self, "fake-candidate", "1ms"}, fakeElectorate{-1}, 50 * time.Millisecond, "no election within"},
		{"deadline ahead", []string{self, "fake-candidate", "1h"}, fakeElectorate{150 * time.Millisecond}, 50 * time.Millisecond, "not before the new election"},
		{"candidate dies", []string{self, "candidate", "--system", "nope"}, fakeElectorate{-1}, time.Second, "exited before the kill"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg.Candidate = c.candidate
			r := failoverRound(context.Background(), c.sys, cfg, c.kill, true)
			if c.want == "" {
				if r.Err != nil || !r.DeadlineBefore() || r.Failover <= 0 || r.NewEpoch != 2 || r.OldEpoch != 1 {
					t.Fatalf("%+v", r)
				}
				return
			}
			if r.Err == nil || !strings.Contains(r.Err.Error(), c.want) {
				t.Fatalf("error %v, want %q", r.Err, c.want)
			}
		})
	}
}

func TestFailoverLines(t *testing.T) {
	l, err := parseCandidateLine("elected 7 1000 3000")
	if err != nil || l.kind != "elected" || l.epoch != 7 || l.at.UnixNano() != 1000 || l.deadline.UnixNano() != 3000 {
		t.Errorf("elected: %+v, %v", l, err)
	}
	l, err = parseCandidateLine("elected 7 1000")
	if err != nil || !l.deadline.IsZero() {
		t.Errorf("elected without deadline: %+v, %v", l, err)
	}
	if l, err := parseCandidateLine("deadline 5000"); err != nil || l.deadline.UnixNano() != 5000 {
		t.Errorf("deadline: %+v, %v", l, err)
	}
	for _, bad := range []string{"", "elected x 1", "deadline", "hello 1"} {
		if _, err := parseCandidateLine(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	ds := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}
	if p50, p99 := Percentile(ds, 0.5), Percentile(ds, 0.99); p50 != 10 || p99 != 20 {
		t.Errorf("p50 %v, p99 %v of 1..20", p50, p99)
	}
	if Percentile(nil, 0.5) != 0 {
		t.Error("percentile of nothing")
	}
}
