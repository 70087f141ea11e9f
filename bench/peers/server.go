package peers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// Bounds on a started server's life.
const (
	readyTimeout = 30 * time.Second
	stopTimeout  = 10 * time.Second
)

// server is a peer's server process started for one run, with a temp dir
// for its data and its log.
type server struct {
	name string
	dir  string
	cmd  *exec.Cmd
	log  *os.File
	done chan error // the process's exit
}

// startServer runs bin with the args args(dir) builds, dir being a fresh
// temp dir, then calls ready until it succeeds (the server answers). On
// failure the tail of the server's log is in the error.
func startServer(ctx context.Context, name, bin string, args func(dir string) []string, ready func(ctx context.Context) error) (*server, error) {
	path, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w (install it, e.g. apt-get install redis-server etcd-server, or name the binary with its flag)", name, err)
	}
	dir, err := os.MkdirTemp("", "kahuna-bench-"+name+"-")
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	log, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	s := &server{name: name, dir: dir, log: log, done: make(chan error, 1)}
	s.cmd = exec.Command(path, args(dir)...)
	s.cmd.Stdout, s.cmd.Stderr = log, log
	if err := s.cmd.Start(); err != nil {
		_ = log.Close()
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() { s.done <- s.cmd.Wait() }()

	rctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	for {
		err := ready(rctx)
		if err == nil {
			return s, nil
		}
		select {
		case exit := <-s.done:
			s.done <- exit
			return nil, errors.Join(fmt.Errorf("%s exited at start (%v): %s", name, exit, s.logTail()), s.stop())
		case <-rctx.Done():
			return nil, errors.Join(fmt.Errorf("%s not ready within %v: %w: %s", name, readyTimeout, err, s.logTail()), s.stop())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stop terminates the server (SIGTERM, then SIGKILL) and removes its dir.
func (s *server) stop() error {
	var err error
	select {
	case <-s.done: // already exited
	default:
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(stopTimeout):
			_ = s.cmd.Process.Kill()
			<-s.done
			err = fmt.Errorf("%s ignored SIGTERM for %v, killed", s.name, stopTimeout)
		}
	}
	return errors.Join(err, s.log.Close(), os.RemoveAll(s.dir))
}

// logTail is the end of the server's log, for error messages.
func (s *server) logTail() string {
	b, _ := os.ReadFile(s.log.Name())
	if len(b) > 600 {
		b = b[len(b)-600:]
	}
	return string(bytes.TrimSpace(b))
}

// freePort asks the kernel for a free loopback port. Another process could
// take it before the server binds it; the server then fails to start and
// says so.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
