//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package filefence

import (
	"errors"
	"os"
	"syscall"
)

// tryFlock takes an exclusive flock of f without waiting; held is false
// when another descriptor holds it.
func tryFlock(f *os.File) (held bool, err error) {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, syscall.EWOULDBLOCK):
			return false, nil
		case errors.Is(err, syscall.EINTR):
			continue
		}
		return false, err
	}
}
