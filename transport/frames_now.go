package transport

import (
	"syscall"

	v1 "github.com/kahunago/kahuna/transport/kahunav1pb"
)

// A frame written "now" is written by a goroutine that must not wait on
// the connection: a lock actor's, handing a released lock to a waiter on
// another connection. A peer that stopped reading fills its socket, and a
// write that waited for room would hold the actor, and every lock it
// serves, for up to frameWriteTimeout. So such a frame gets one write
// system call, never a wait: taken whole, it is sent; not taken at all,
// the caller sends it the usual way from a goroutine that may wait; taken
// in part, the rest follows from a goroutine of its own, before any other
// frame (it holds the write lock until then).

// oneWrite makes one write system call at a time on a socket. A
// connection keeps one, with the function RawConn.Write calls, so that a
// frame written now allocates nothing (a closure made for each write went
// to the heap, with what it wrote to).
type oneWrite struct {
	b  []byte
	n  int
	do func(fd uintptr) bool
}

func newOneWrite() *oneWrite {
	w := &oneWrite{}
	w.do = w.write
	return w
}

func (w *oneWrite) write(fd uintptr) bool {
	w.n = writeFD(fd, w.b)
	return true // one attempt: never wait for the socket
}

// writeOnce makes one write system call of b on rc and returns how many
// bytes it took (0 when none: the socket is full, or broken, which the
// next write that may wait reports). One at a time.
func (w *oneWrite) writeOnce(rc syscall.RawConn, b []byte) int {
	w.b, w.n = b, 0
	err := rc.Write(w.do)
	w.b = nil
	if err != nil || w.n < 0 {
		return 0
	}
	return w.n
}

// writeNowMsg sends one frame holding m, as enc encodes it, without
// waiting on the connection, and reports whether it did (see above; one
// enc refuses is not sent). failed is called if the rest of a frame taken
// in part cannot be written.
func (f *frameConn) writeNowMsg(m any, enc encoder, failed func()) bool {
	if f.raw == nil || !f.wmu.TryLock() {
		return false
	}
	b, err := appendFrame(f.wbuf[:0], m, enc)
	if err != nil {
		f.wmu.Unlock()
		return false
	}
	f.wbuf = b
	if f.once == nil {
		f.once = newOneWrite()
	}
	switch k := f.once.writeOnce(f.raw, b); {
	case k == len(b):
		f.wmu.Unlock()
		return true
	case k == 0:
		f.wmu.Unlock()
		return false
	default:
		rest := b[k:] // f.wbuf, not touched by others until the unlock
		go func() {
			defer f.wmu.Unlock()
			if f.send(rest) != nil {
				failed()
			}
		}()
		return true
	}
}

// sendNow implements sendNower: a framed LockStream over a plain socket.
func (l lockServerFrames) sendNow(m *v1.LockStreamResponse) bool {
	return l.writeNowMsg(m, appendServerMsg, l.cancel)
}
