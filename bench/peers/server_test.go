package peers

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"
)

// A server whose port another process took before it bound it is started
// again on new ports, a bounded number of times.
func TestStartTriesNewPortsWhenOneIsTaken(t *testing.T) {
	needServer(t, "redis-server")
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	takenPort := taken.Addr().(*net.TCPAddr).Port
	t.Cleanup(func() { pickPorts = freePorts })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	t.Run("taken once", func(t *testing.T) {
		picks := 0
		pickPorts = func(n int) ([]int, error) {
			if picks++; picks == 1 {
				return []int{takenPort}, nil
			}
			return freePorts(n)
		}
		srv, addr, err := startRedis(ctx, "redis-server", false)
		if err != nil {
			t.Fatalf("start after a taken port: %v", err)
		}
		defer srv.stop()
		if picks != 2 {
			t.Errorf("ports picked %d times, want 2", picks)
		}
		if err := ping(ctx, addr); err != nil {
			t.Errorf("ping the started server: %v", err)
		}
	})
	t.Run("taken every time", func(t *testing.T) {
		picks := 0
		pickPorts = func(int) ([]int, error) {
			picks++
			return []int{takenPort}, nil
		}
		srv, _, err := startRedis(ctx, "redis-server", false)
		if err == nil {
			srv.stop()
			t.Fatal("started on a port in use")
		}
		if !errors.Is(err, errPortTaken) {
			t.Errorf("error %v does not say the port was taken", err)
		}
		if picks != portAttempts {
			t.Errorf("ports picked %d times, want %d", picks, portAttempts)
		}
	})
}
