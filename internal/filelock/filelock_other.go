//go:build !unix && !windows

package filelock

import (
	"errors"
	"os"
)

func tryLock(*os.File) error {
	return errors.New("filelock: file locks are not supported on this system")
}
