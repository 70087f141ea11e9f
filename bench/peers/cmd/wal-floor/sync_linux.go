package main

import (
	"os"
	"syscall"
)

// fdatasync flushes f's data, and its size, to the disk: what a database's
// log pays per commit.
func fdatasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }
