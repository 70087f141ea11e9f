package kahuna_test

import (
	"io"
	"log"
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	// dragonboat's capnslog takes over the std logger at import and pebble
	// prints a harmless "vfs: not supported" through it on in-memory
	// filesystems; keep test and benchmark output readable.
	log.SetOutput(io.Discard)
	os.Exit(m.Run())
}
