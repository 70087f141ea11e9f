//go:build unix

package transport

import (
	"net"
	"syscall"
)

// rawConnOf is c's socket, for a system call that must not wait, or nil
// when c is not a plain socket (TLS, a pipe): a frame on it is then never
// sent now, and a kept-alive client connection is not probed.
func rawConnOf(c net.Conn) syscall.RawConn {
	if pc, ok := c.(*prefixConn); ok {
		c = pc.Conn
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// writeFD is one write system call of b on fd: the bytes taken, or -1.
func writeFD(fd uintptr, b []byte) int {
	n, _ := syscall.Write(int(fd), b)
	return n
}
