//go:build !unix

package transport

import (
	"net"
	"syscall"
)

// rawConnOf is nil here: frames are never sent now, and a kept-alive
// client connection is not probed (client_h1_other.go).
func rawConnOf(net.Conn) syscall.RawConn { return nil }

// writeFD is never called here (rawConnOf is nil).
func writeFD(uintptr, []byte) int { return -1 }
