// Package twoproc runs a measurement's server side as a second process:
// the running executable started again with an environment variable
// naming the loopback address to listen on, so client and server are
// scheduled as two processes, as a client and a node are.
package twoproc

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"time"
)

// Server is a started server process.
type Server struct {
	Addr string // where it listens (once it has started)
	cmd  *exec.Cmd
}

// Start starts this executable again with addrEnv set to a free loopback
// address and env added to its environment. The started process must
// look at addrEnv first thing and serve there (its stderr is ours).
func Start(addrEnv string, env ...string) (*Server, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := lis.Addr().String()
	lis.Close() // the server process listens there
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(append(os.Environ(), addrEnv+"="+addr), env...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the server process: %w", err)
	}
	return &Server{Addr: addr, cmd: cmd}, nil
}

// Dial connects to the server, retrying for up to 5 s while it starts.
func (s *Server) Dial() (net.Conn, error) {
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		c, err := net.Dial("tcp", s.Addr)
		if err == nil {
			return c, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the server process did not listen: %w", err)
		}
	}
}

// Stop kills the server process and waits for it.
func (s *Server) Stop() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}
