// Package twoproc runs a measurement's server side as a second process:
// the running executable started again with an environment variable
// naming the loopback address to listen on, so client and server are
// scheduled as two processes, as a client and a node are.
package twoproc

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"time"
)

// Server is a started server process.
type Server struct {
	Addr string // where it listens
	cmd  *exec.Cmd
}

// listenerFD is the descriptor the server process finds its listener on:
// the first of cmd.ExtraFiles.
const listenerFD = 3

// Start starts this executable again, with addrEnv set to the address of
// a loopback listener it hands the process already bound (no other process
// can take the port between its choice and the server's bind), and env
// added to its environment. The started process must look at addrEnv first
// thing and serve on Listen's listener (its stderr is ours).
func Start(addrEnv string, env ...string) (*Server, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer lis.Close() // the server process has its own descriptor of it
	f, err := lis.(*net.TCPListener).File()
	if err != nil {
		return nil, fmt.Errorf("the listener's descriptor: %w", err)
	}
	defer f.Close()
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	addr := lis.Addr().String()
	cmd := exec.Command(self)
	cmd.Env = append(append(os.Environ(), addrEnv+"="+addr), env...)
	cmd.ExtraFiles = []*os.File{f}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the server process: %w", err)
	}
	return &Server{Addr: addr, cmd: cmd}, nil
}

// Listen returns, in the server process, the listener Start handed it.
func Listen() (net.Listener, error) {
	f := os.NewFile(listenerFD, "twoproc listener")
	if f == nil {
		return nil, errors.New("twoproc: no listener handed to this process")
	}
	defer f.Close() // FileListener has its own copy
	lis, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("twoproc: the listener handed to this process: %w", err)
	}
	return lis, nil
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
