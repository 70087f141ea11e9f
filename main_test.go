package kahuna_test

import (
	"io"
	"log"
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	// Keep test and benchmark output free of any std log line, except in
	// the child of TestEmbeddedNodeWritesNothingToStderr, which must see
	// what an embedder sees.
	if os.Getenv(quietChildEnv) == "" {
		log.SetOutput(io.Discard)
	}
	os.Exit(m.Run())
}
