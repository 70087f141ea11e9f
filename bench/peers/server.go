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
	"strings"
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
	// exited is closed when the process has exited, exit being its
	// Wait's error.
	exited chan struct{}
	exit   error
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
	s := &server{name: name, dir: dir, log: log, exited: make(chan struct{})}
	s.cmd = exec.Command(path, args(dir)...)
	s.cmd.Stdout, s.cmd.Stderr = log, log
	if err := s.cmd.Start(); err != nil {
		_ = log.Close()
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		s.exit = s.cmd.Wait()
		close(s.exited)
	}()

	// A check is cut short when the server exits: one that reached
	// whatever took the server's port might wait for an answer that never
	// comes.
	rctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	go func() {
		select {
		case <-s.exited:
			cancel()
		case <-rctx.Done():
		}
	}()
	for {
		err := ready(rctx)
		if err == nil {
			return s, nil
		}
		select {
		case <-s.exited:
			return nil, errors.Join(s.exitedAtStart(), s.stop())
		case <-rctx.Done():
			if s.hasExited() {
				return nil, errors.Join(s.exitedAtStart(), s.stop())
			}
			return nil, errors.Join(fmt.Errorf("%s not ready within %v: %w: %s", name, readyTimeout, err, s.logTail()), s.stop())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// hasExited reports whether the process has exited (its Wait returned).
func (s *server) hasExited() bool {
	select {
	case <-s.exited:
		return true
	default:
		return false
	}
}

// exitedAtStart is the error of a server that exited before it was
// ready: errPortTaken when its log says it could not bind a port.
func (s *server) exitedAtStart() error {
	tail := s.logTail()
	err := fmt.Errorf("%s exited at start (%v): %s", s.name, s.exit, tail)
	if strings.Contains(strings.ToLower(tail), "address already in use") {
		return fmt.Errorf("%w: %w", errPortTaken, err)
	}
	return err
}

// stop terminates the server (SIGTERM, then SIGKILL) and removes its dir.
func (s *server) stop() error {
	var err error
	if !s.hasExited() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(stopTimeout):
			_ = s.cmd.Process.Kill()
			<-s.exited
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

// portAttempts bounds the starts of a server on new ports when another
// process took one of its ports first.
const portAttempts = 3

// errPortTaken is a server that exited at start because a port it was
// given was in use.
var errPortTaken = errors.New("a port was taken before the server bound it")

// withFreePorts calls start with n distinct free loopback ports, and again
// with new ones when the server could not bind one (errPortTaken): a port
// is free when picked but not reserved, and another process (a test's
// server, or an outgoing connection, which takes its port from the same
// range) can take it before the server binds it.
func withFreePorts(n int, start func(ports []int) error) error {
	for attempt := 1; ; attempt++ {
		ports, err := pickPorts(n)
		if err != nil {
			return err
		}
		err = start(ports)
		if !errors.Is(err, errPortTaken) || attempt == portAttempts {
			return err
		}
	}
}

// pickPorts is freePorts; tests replace it.
var pickPorts = freePorts

// freePorts asks the kernel for n free loopback ports, holding each until
// all are picked so that no two are the same.
func freePorts(n int) ([]int, error) {
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		defer l.Close()
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

func loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
