package testport

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
)

func TestRangeOutside(t *testing.T) {
	for _, c := range []struct {
		low, high, lo, hi int
		ok                bool
	}{
		{32768, 60999, 10000, 32767, true}, // Linux's default: below
		{49152, 65535, 10000, 49151, true}, // the IANA range
		{1024, 60999, 61000, 65535, true},  // too few below: above
		{1024, 65000, 0, 0, false},         // too few either side
	} {
		r, err := rangeOutside(c.low, c.high)
		if (err == nil) != c.ok || r.lo != c.lo || r.hi != c.hi {
			t.Errorf("rangeOutside(%d, %d) = %+v, %v; want %d-%d, ok %v", c.low, c.high, r, err, c.lo, c.hi, c.ok)
		}
	}
}

func TestEphemeralRange(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		name := filepath.Join(dir, strconv.Itoa(len(s)))
		if err := os.WriteFile(name, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return name
	}
	if low, high, err := ephemeralRange(write("32768\t60999\n")); err != nil || low != 32768 || high != 60999 {
		t.Errorf("Linux's format: %d, %d, %v", low, high, err)
	}
	for _, bad := range []string{"", "32768", "x 60999", "60999 32768", "1 70000", "1 2 3"} {
		if _, _, err := ephemeralRange(write(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if _, _, err := ephemeralRange(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v, want ErrNotExist", err)
	}
}

// held reports whether another test holds port's reservation.
func held(t *testing.T, port int) bool {
	t.Helper()
	dir, err := lockDir()
	if err != nil {
		t.Fatal(err)
	}
	f, err := lockPort(dir, port)
	if errors.Is(err, errHeld) {
		return true
	}
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	return false
}

func inRange(t *testing.T, port int) {
	t.Helper()
	r, err := portRange()
	if err != nil {
		t.Fatal(err)
	}
	if port < r.lo || port > r.hi {
		t.Fatalf("port %d outside %d-%d", port, r.lo, r.hi)
	}
}

// A listener's port stays reserved after it is closed, until its test
// ends, and can be bound again meanwhile.
func TestListenReservesUntilTheTestEnds(t *testing.T) {
	var port int
	t.Run("reserving", func(t *testing.T) {
		l := Listen(t)
		port = l.Addr().(*net.TCPAddr).Port
		inRange(t, port)
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if !held(t, port) {
			t.Fatal("closed listener's port no longer reserved")
		}
		again, err := net.Listen("tcp", l.Addr().String())
		if err != nil {
			t.Fatalf("bind the reserved address again: %v", err)
		}
		again.Close()
	})
	if held(t, port) {
		t.Fatalf("port %d still reserved after its test ended", port)
	}
}

func TestClosed(t *testing.T) {
	l := Listen(t)
	if Closed(l) {
		t.Fatal("an open listener reported closed")
	}
	l.Close()
	if !Closed(l) {
		t.Fatal("a closed listener reported open")
	}
}

// Addr's port is reserved and free to bind.
func TestAddr(t *testing.T) {
	addr := Addr(t)
	host, p, err := net.SplitHostPort(addr)
	if err != nil || host != Host {
		t.Fatalf("Addr() = %q", addr)
	}
	port, _ := strconv.Atoi(p)
	inRange(t, port)
	if !held(t, port) {
		t.Fatal("Addr's port not reserved")
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("bind Addr's port: %v", err)
	}
	l.Close()
}

// Reservations made at once never share a port.
func TestConcurrentReservationsDiffer(t *testing.T) {
	const n = 64
	ports := make(chan int, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { ports <- Port(t) })
	}
	wg.Wait()
	close(ports)
	seen := map[int]bool{}
	for p := range ports {
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
}

// Another test binary cannot take a port this one reserved: the child
// (this binary, run as TestHelperChildLock) finds it held.
func TestReservedAcrossProcesses(t *testing.T) {
	port := Port(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperChildLock$", "-test.count=1")
	cmd.Env = append(os.Environ(), "TESTPORT_CHILD_PORT="+strconv.Itoa(port))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

// TestHelperChildLock is TestReservedAcrossProcesses's child.
func TestHelperChildLock(t *testing.T) {
	p := os.Getenv("TESTPORT_CHILD_PORT")
	if p == "" {
		t.Skip("run by TestReservedAcrossProcesses")
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	if !held(t, port) {
		t.Fatalf("port %d, reserved by the parent process, was free to reserve here", port)
	}
}
