package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kahunago/kahuna"
)

// scenario is one run: its log, and what the parent and workers found.
type scenario struct {
	fenced   bool
	log      []string
	final    int
	c2Token  int64
	c1Lost   bool
	rejected bool  // C1's write was rejected
	current  int64 // the winning token it was told
}

// run runs the scenario without and then with the fence, starting workers
// from the executable self; dsn "" is SQLite in a temporary directory.
func run(ctx context.Context, self, dsn string, ttl time.Duration) ([]scenario, error) {
	if dsn == "" {
		dir, err := os.MkdirTemp("", "gc-pause-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		dsn = filepath.Join(dir, "value.db")
	}
	st, err := openStore(ctx, dsn)
	if err != nil {
		return nil, err
	}
	defer st.close()
	node, err := kahuna.Open(kahuna.Config{ListenAddress: "127.0.0.1:0"}) // in memory
	if err != nil {
		return nil, err
	}
	defer node.Close()
	env := []string{
		roleEnv + "=worker",
		endpointEnv + "=http://" + node.ListenAddress(),
		dsnEnv + "=" + dsn,
		ttlEnv + "=" + ttl.String(),
	}
	var out []scenario
	for i, fenced := range []bool{false, true} {
		lock := fmt.Sprintf("gc-pause/%d/%d", os.Getpid(), i)
		if err := st.reset(ctx, i+1, lock); err != nil {
			return nil, err
		}
		env := append(env, fmt.Sprintf("%s=%d", idEnv, i+1), lockEnv+"="+lock, fenceEnv+"="+map[bool]string{false: "0", true: "1"}[fenced])
		sc, err := runOnce(ctx, self, env, fenced)
		if err != nil {
			return nil, err
		}
		if sc.final, err = st.read(ctx, i+1); err != nil {
			return nil, err
		}
		sc.add(time.Time{}, "", fmt.Sprintf("final value = %d", sc.final))
		out = append(out, sc)
	}
	return out, nil
}

func runOnce(ctx context.Context, self string, env []string, fenced bool) (scenario, error) {
	sc := scenario{fenced: fenced}
	start := time.Now()
	lines := make(chan line)

	c1, err := startWorker(ctx, self, env, "C1", lines)
	if err != nil {
		return sc, err
	}
	// C1's lines until it stops itself.
	for l := range lines {
		if l.text == "stopping" {
			break
		}
		if err := sc.take(start, l); err != nil {
			return sc, err
		}
	}
	// Wait for the stop itself (waitpid with WUNTRACED), not for a time.
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(c1.Process.Pid, &ws, syscall.WUNTRACED, nil); err != nil || !ws.Stopped() {
		return sc, fmt.Errorf("waiting for C1 to stop: %v (status %v)", err, ws)
	}
	sc.add(start, "C1", "is stopped (SIGSTOP), as by a long GC pause")

	c2, err := startWorker(ctx, self, env, "C2", lines)
	if err != nil {
		return sc, err
	}
	if err := sc.drain(start, lines, c2); err != nil {
		return sc, err
	}
	if err := c1.Process.Signal(syscall.SIGCONT); err != nil {
		return sc, err
	}
	sc.add(start, "C1", "is resumed (SIGCONT)")
	if err := sc.drain(start, lines, c1); err != nil {
		return sc, err
	}
	return sc, nil
}

// line is one line of a worker's stdout.
type line struct {
	who, text string
	at        time.Time
	done      bool // the worker's stdout closed
}

func startWorker(ctx context.Context, self string, env []string, name string, lines chan<- line) (*exec.Cmd, error) {
	cmd := exec.CommandContext(ctx, self)
	cmd.Env = append(os.Environ(), append(env, nameEnv+"="+name)...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	go forward(name, stdout, lines)
	return cmd, nil
}

func forward(who string, r io.Reader, lines chan<- line) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		lines <- line{who: who, text: sc.Text(), at: time.Now()}
	}
	lines <- line{who: who, done: true}
}

// drain takes cmd's lines until its stdout closes, then waits for it.
func (sc *scenario) drain(start time.Time, lines <-chan line, cmd *exec.Cmd) error {
	for l := range lines {
		if l.done {
			break
		}
		if err := sc.take(start, l); err != nil {
			return err
		}
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	return nil
}

func (sc *scenario) take(start time.Time, l line) error {
	kind, rest, _ := strings.Cut(l.text, " ")
	switch kind {
	case "event":
		sc.log = append(sc.log, fmt.Sprintf("t=%5.2fs %s: %s", l.at.Sub(start).Seconds(), l.who, rest))
		if strings.HasPrefix(rest, "error:") {
			return fmt.Errorf("%s: %s", l.who, rest)
		}
	case "result":
		key, val, _ := strings.Cut(rest, " ")
		n, _ := strconv.ParseInt(val, 10, 64)
		switch key {
		case "lost":
			sc.c1Lost = val == "true"
		case "rejected":
			sc.rejected, sc.current = true, n
		case "token":
			sc.c2Token = n
		}
	default:
		return fmt.Errorf("%s said %q", l.who, l.text)
	}
	return nil
}

func (sc *scenario) add(start time.Time, who, text string) {
	if start.IsZero() {
		sc.log = append(sc.log, text)
		return
	}
	sc.log = append(sc.log, fmt.Sprintf("t=%5.2fs %s %s", time.Since(start).Seconds(), who, text))
}

// printSideBySide prints the runs in columns, as the seed's table.
func printSideBySide(w io.Writer, runs []scenario) {
	const width = 78
	var cols [][]string
	for _, r := range runs {
		title := "--- WITHOUT a fence ---"
		if r.fenced {
			title = "--- WITH the fence (sqlfence) ---"
		}
		cols = append(cols, append([]string{title}, r.log...))
	}
	rows := 0
	for _, c := range cols {
		rows = max(rows, len(c))
	}
	for i := range rows {
		var b strings.Builder
		for j, c := range cols {
			cell := ""
			if i < len(c) {
				cell = c[i]
			}
			if j < len(cols)-1 {
				fmt.Fprintf(&b, "%-*s  ", width, cell)
			} else {
				b.WriteString(cell)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
}
