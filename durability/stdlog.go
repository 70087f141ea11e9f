package durability

import (
	"io"
	"log"
	"log/slog"
	"os"
	"regexp"
	"runtime"
	"strings"
)

// dragonboat's capnslog takes the standard logger over when it is
// initialised (flags 0, its own "I | log:" format), which rewrites every
// log.Print line of a program that merely imports kahuna. This package is
// initialised right after it, so it gives the standard logger back its
// defaults: the host's own lines come out exactly as the log package
// writes them, on stderr. One thing stays diverted: pebble, dragonboat's
// log store, logs through the standard logger (its background errors, e.g.
// "vfs: not supported" from the in-memory file system that cannot report
// disk usage), and an embedded node must not write there, so lines whose
// caller is pebble or dragonboat go to the library logs (at Info, below
// DefaultLibraryLogLevel). A host that sets its own output later replaces
// this writer, and then sees those lines too, as it would of any library.
func init() {
	log.SetFlags(log.LstdFlags)
	log.SetPrefix("")
	log.SetOutput(libraryLineDiverter{out: os.Stderr})
}

// libraryLineDiverter writes the standard logger's lines to out, except
// those a library under the Raft backend wrote.
type libraryLineDiverter struct{ out io.Writer }

func (d libraryLineDiverter) Write(b []byte) (int, error) {
	if lib := libraryCaller(); lib != "" {
		raftLogger{pkg: lib}.log(slog.LevelInfo, "%s", []any{strings.TrimSpace(string(stdLogHeader.ReplaceAll(b, nil)))})
		return len(b), nil
	}
	return d.out.Write(b)
}

// stdLogHeader matches the date and time the standard logger's default
// flags put before a line (with or without microseconds).
var stdLogHeader = regexp.MustCompile(`^\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}(\.\d+)? `)

// libraryCaller names the library (pebble, dragonboat) whose code called
// the standard logger, or "" if none did.
func libraryCaller() string {
	pcs := make([]uintptr, 32)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(3, pcs)])
	for {
		fr, more := frames.Next()
		switch {
		case strings.HasPrefix(fr.Function, "github.com/cockroachdb/pebble"):
			return "pebble"
		case strings.HasPrefix(fr.Function, "github.com/lni/dragonboat"):
			return "dragonboat"
		}
		if !more {
			return ""
		}
	}
}
