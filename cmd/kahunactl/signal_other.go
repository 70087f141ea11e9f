//go:build !unix

package main

import "os"

// signalName is the signal's name as Go writes it.
func signalName(s os.Signal) string { return s.String() }
