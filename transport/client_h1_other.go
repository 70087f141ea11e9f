//go:build !unix

package transport

import "net"

// connOpen cannot peek without blocking here, so a connection idle for
// longer than h1ProbeAfter is not used again.
func connOpen(net.Conn) bool { return false }
