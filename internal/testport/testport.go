// Package testport gives tests loopback TCP ports that no other test, in
// this process or in another, holds at the same time.
//
// Binding 127.0.0.1:0, reading the port and closing the listener for a
// node to bind later is a race: go test runs packages in parallel, and
// another test (or the kernel, for an outgoing connection) can take the
// port in between. A port from here is reserved until the test ends:
//   - it comes from below the range the kernel picks from for port 0 and
//     for outgoing connections (ip_local_port_range), so nothing takes it
//     by chance;
//   - a lock on a file named after it in os.TempDir, held until the test
//     ends and dropped by the kernel if the process dies, keeps every other
//     test binary that uses this package off it.
//
// So a test may hand a reserved port to a process that binds it later,
// and bind it again after a node restarts.
package testport

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/kahunago/kahuna/internal/filelock"
)

// Host is the address every port is reserved on.
const Host = "127.0.0.1"

const (
	// lowest is the least port handed out: below it lie most well-known
	// services.
	lowest = 10000
	// minPorts is the fewest ports a usable range offers.
	minPorts = 1000
	// Linux's default ip_local_port_range, assumed where it cannot be read.
	defaultEphemeralLow, defaultEphemeralHigh = 32768, 60999
)

// Listen returns a listener on a reserved port, for the test to hand to
// the component that serves; whoever ends up with it closes it. The port
// stays reserved until the test ends, so the test may bind the address
// again once the listener is closed (a node restarted).
func Listen(t testing.TB) net.Listener {
	t.Helper()
	_, l := reserve(t)
	return l
}

// Addr returns "127.0.0.1:port" for a reserved port nothing listens on:
// for a process that must be told its port before it starts, or for a
// dial that must find no listener.
func Addr(t testing.TB) string {
	t.Helper()
	return net.JoinHostPort(Host, strconv.Itoa(Port(t)))
}

// Port is Addr's port.
func Port(t testing.TB) int {
	t.Helper()
	port, probe := reserve(t)
	// The probe only showed that no process outside the tests has the
	// port; the reservation keeps it free once closed.
	if err := probe.Close(); err != nil {
		t.Fatalf("testport: close the probe of port %d: %v", port, err)
	}
	return port
}

// Closed reports whether l, a TCP listener, was closed: for tests of
// components that take a listener over. It does not wait for a
// connection (one pending is accepted and closed).
func Closed(l net.Listener) bool {
	tl, ok := l.(*net.TCPListener)
	if !ok {
		panic(fmt.Sprintf("testport.Closed: %T is not a *net.TCPListener", l))
	}
	_ = tl.SetDeadline(time.Now()) // fails once closed: Accept says so
	c, err := tl.Accept()
	if err == nil {
		c.Close()
	}
	return errors.Is(err, net.ErrClosed)
}

// reserve locks a free port for t, until t ends, and returns it bound.
func reserve(t testing.TB) (int, net.Listener) {
	t.Helper()
	r, err := portRange()
	if err != nil {
		t.Fatalf("testport: %v", err)
	}
	dir, err := lockDir()
	if err != nil {
		t.Fatalf("testport: %v", err)
	}
	n := r.hi - r.lo + 1
	start := rand.IntN(n)
	for i := range n {
		port := r.lo + (start+i)%n
		lock, err := lockPort(dir, port)
		if errors.Is(err, errHeld) {
			continue
		}
		if err != nil {
			t.Fatalf("testport: %v", err)
		}
		l, err := net.Listen("tcp", net.JoinHostPort(Host, strconv.Itoa(port)))
		if err != nil {
			lock.Close() // in use outside the tests
			continue
		}
		t.Cleanup(func() { lock.Close() })
		return port, l
	}
	t.Fatalf("testport: no free port in %d-%d", r.lo, r.hi)
	return 0, nil
}

// errHeld is a port another test holds.
var errHeld = errors.New("port held by another test")

// lockPort takes the lock of port, without waiting; closing the file
// drops it. The lock belongs to the open file, so two reservations in
// one process exclude each other too.
func lockPort(dir string, port int) (*os.File, error) {
	name := filepath.Join(dir, strconv.Itoa(port))
	// Read-only: a lock needs no write access, so a file another user
	// created serves as well.
	f, err := os.OpenFile(name, os.O_RDONLY|os.O_CREATE, 0o666)
	if err != nil {
		return nil, fmt.Errorf("lock file of port %d: %w", port, err)
	}
	if err := filelock.TryLock(f); err != nil {
		f.Close()
		if errors.Is(err, filelock.ErrHeld) {
			return nil, errHeld
		}
		return nil, fmt.Errorf("lock port %d: %w", port, err)
	}
	return f, nil
}

// lockDir is the directory of the lock files, the same for every test
// binary of a run (they share os.TempDir).
var lockDir = sync.OnceValues(func() (string, error) {
	dir := filepath.Join(os.TempDir(), "kahuna-test-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return "", fmt.Errorf("lock dir: %w", err)
	}
	return dir, nil
})

// span is a range of ports, lo to hi inclusive.
type span struct{ lo, hi int }

// portRange is the ports handed out: those below the kernel's ephemeral
// range, or above it when too few lie below.
var portRange = sync.OnceValues(func() (span, error) {
	low, high, err := ephemeralRange("/proc/sys/net/ipv4/ip_local_port_range")
	if errors.Is(err, os.ErrNotExist) {
		low, high, err = defaultEphemeralLow, defaultEphemeralHigh, nil // not Linux
	}
	if err != nil {
		return span{}, err
	}
	return rangeOutside(low, high)
})

// rangeOutside picks the ports outside the ephemeral range low-high.
func rangeOutside(low, high int) (span, error) {
	switch {
	case low-lowest >= minPorts:
		return span{lowest, low - 1}, nil
	case 65535-high >= minPorts:
		return span{high + 1, 65535}, nil
	}
	return span{}, fmt.Errorf("the ephemeral port range %d-%d leaves fewer than %d ports outside it", low, high, minPorts)
}

// ephemeralRange reads ip_local_port_range ("32768\t60999").
func ephemeralRange(file string) (low, high int, err error) {
	f, err := os.Open(file)
	if err != nil {
		return 0, 0, fmt.Errorf("ephemeral port range: %w", err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	s.Split(bufio.ScanWords)
	var ports []int
	for s.Scan() {
		p, err := strconv.Atoi(s.Text())
		if err != nil {
			return 0, 0, fmt.Errorf("ephemeral port range in %s: %w", file, err)
		}
		ports = append(ports, p)
	}
	if err := s.Err(); err != nil {
		return 0, 0, fmt.Errorf("ephemeral port range in %s: %w", file, err)
	}
	if len(ports) != 2 || ports[0] < 1 || ports[0] > ports[1] || ports[1] > 65535 {
		return 0, 0, fmt.Errorf("ephemeral port range in %s: %v is not two ports, low then high", file, ports)
	}
	return ports[0], ports[1], nil
}
