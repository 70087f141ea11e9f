//go:build !linux

package main

import "os"

// fdatasync is f.Sync where fdatasync is not offered.
func fdatasync(f *os.File) error { return f.Sync() }
