//go:build !linux

package main

import "errors"

var errNotLinux = errors.New("pinning a thread to a CPU is only done on Linux here")

func pin(int) error { return errNotLinux }

func allowedCPUs() ([]int, error) { return nil, errNotLinux }
