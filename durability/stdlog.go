package durability

import (
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strings"

	"github.com/lni/goutils/logutil/capnslog"
)

// pebble, dragonboat's log store, logs through the standard log package
// (its background errors, e.g. "vfs: not supported" from the in-memory file
// system that cannot report disk usage), and dragonboat's capnslog takes
// the standard logger over at import and writes it to stderr. An embedded
// node must not write there: stdLogFormatter, installed once with the
// dragonboat logger factory, sends the lines that come from the libraries
// under the Raft backend to the library logs (at Info, so below
// DefaultLibraryLogLevel) and leaves everybody else's standard log lines
// to capnslog's default formatter, as before.
type stdLogFormatter struct{ next capnslog.Formatter }

func installStdLogFormatter() {
	capnslog.SetFormatter(stdLogFormatter{next: capnslog.NewDefaultFormatter(os.Stderr)})
}

func (f stdLogFormatter) Format(pkg string, level capnslog.LogLevel, depth int, entries ...any) {
	if lib := libraryCaller(); lib != "" {
		raftLogger{pkg: lib}.log(capnsLevel(level), "%s", []any{strings.TrimSpace(fmt.Sprint(entries...))})
		return
	}
	f.next.Format(pkg, level, depth+1, entries...)
}

func (f stdLogFormatter) Flush() { f.next.Flush() }

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

func capnsLevel(l capnslog.LogLevel) slog.Level {
	switch {
	case l <= capnslog.ERROR:
		return slog.LevelError
	case l == capnslog.WARNING:
		return slog.LevelWarn
	case l <= capnslog.INFO:
		return slog.LevelInfo
	}
	return slog.LevelDebug
}
