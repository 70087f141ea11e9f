// Package pgtest starts a throwaway PostgreSQL cluster for tests: initdb
// in a temporary directory, the server on a loopback port, trust
// authentication, and everything removed by Stop. Run as root, it runs the
// PostgreSQL binaries as the unprivileged postgres user, since initdb and
// postgres refuse to run as root.
package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
)

// BinDir returns the directory of initdb and pg_ctl: $FENCE_PG_BIN when
// set, else the newest /usr/lib/postgresql/*/bin, else the directory of
// pg_ctl on $PATH; "" when there are none.
func BinDir() string {
	if d := os.Getenv("FENCE_PG_BIN"); d != "" {
		return d
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "pg_ctl")); err == nil {
			return d
		}
	}
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		return filepath.Dir(p)
	}
	return ""
}

func version(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// Server is a running throwaway cluster.
type Server struct {
	// DSN reaches database postgres as user postgres over TCP on loopback.
	DSN  string
	bin  string
	dir  string
	cred *syscall.Credential
}

// Start creates and starts a cluster with the binaries in BinDir. extra
// settings are passed to the server as -c name=value.
func Start(ctx context.Context, extra ...string) (*Server, error) {
	bin := BinDir()
	if bin == "" {
		return nil, errors.New("pgtest: no PostgreSQL binaries (set FENCE_PG_BIN)")
	}
	s := &Server{bin: bin}
	dir, err := os.MkdirTemp("", "fence-pg-")
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	s.dir = dir
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			s.remove()
			return nil, fmt.Errorf("pgtest: running as root needs an unprivileged user postgres: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			s.remove()
			return nil, fmt.Errorf("pgtest: %w", err)
		}
	}
	data := filepath.Join(dir, "data")
	if err := s.run(ctx, "initdb", "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"); err != nil {
		s.remove()
		return nil, err
	}
	// A port picked free can be taken before the server binds it: try again.
	for attempt := 0; ; attempt++ {
		port, err := freePort()
		if err != nil {
			s.remove()
			return nil, err
		}
		opts := fmt.Sprintf("-p %d -h 127.0.0.1 -k %s", port, dir)
		for _, e := range extra {
			opts += " -c " + e
		}
		err = s.run(ctx, "pg_ctl", "start", "-w", "-D", data, "-l", filepath.Join(dir, "log"), "-o", opts)
		if err == nil {
			s.DSN = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
			return s, nil
		}
		if attempt == 4 {
			log, _ := os.ReadFile(filepath.Join(dir, "log"))
			s.remove()
			return nil, fmt.Errorf("%w; server log:\n%s", err, log)
		}
	}
}

// Stop stops the server and removes its directory.
func (s *Server) Stop() error {
	err := s.run(context.Background(), "pg_ctl", "stop", "-w", "-m", "fast", "-D", filepath.Join(s.dir, "data"))
	s.remove()
	return err
}

func (s *Server) remove() { os.RemoveAll(s.dir) }

func (s *Server) run(ctx context.Context, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(s.bin, name), args...)
	cmd.Dir = s.dir // the caller's directory may be closed to the postgres user
	cmd.Env = []string{"PATH=" + s.bin + ":/usr/bin:/bin", "LC_ALL=C"}
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("pgtest: %s: %w\n%s", name, err, out.Bytes())
	}
	return nil
}

// freePort picks a port that is free now, below the range the kernel
// hands out for port 0 and outgoing connections, so that nothing takes it
// by chance before the server binds it; Start tries again if something
// does.
func freePort() (int, error) {
	var err error
	for range 20 {
		port := 20000 + rand.IntN(12000)
		var l net.Listener
		if l, err = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
			l.Close()
			return port, nil
		}
	}
	return 0, fmt.Errorf("pgtest: picking a port: %w", err)
}
