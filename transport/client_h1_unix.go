//go:build unix

package transport

import (
	"errors"
	"net"

	"golang.org/x/sys/unix"
)

// connOpen peeks at c without blocking: a server that closed it (FIN or
// reset) or sent something unasked makes it unfit for another request.
func connOpen(c net.Conn) bool {
	rc := rawConnOf(c)
	if rc == nil {
		return false
	}
	open := false
	var buf [1]byte
	err := rc.Read(func(fd uintptr) bool {
		// Nothing to read (EAGAIN) is the one answer of an open,
		// quiet connection: 0 bytes is the server's FIN, any byte an
		// answer to no request.
		_, _, err := unix.Recvfrom(int(fd), buf[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		open = errors.Is(err, unix.EAGAIN)
		return true // never wait for readiness: this is a probe
	})
	return err == nil && open
}
