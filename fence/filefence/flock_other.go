//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package filefence

import (
	"errors"
	"os"
)

func tryFlock(*os.File) (bool, error) { return false, errors.ErrUnsupported }
