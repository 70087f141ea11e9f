package durability

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	dlogger "github.com/lni/dragonboat/v4/logger"
)

// dragonboat accepts one logger factory per process, before any NodeHost.
// Every package logger forwards to raftLog, so later OpenRaft calls can still
// change the destination.
var (
	raftLogOnce sync.Once
	raftLog     atomic.Pointer[slog.Logger]
	raftLevel   atomic.Pointer[slog.Leveler] // nil: DefaultLibraryLogLevel
)

// DefaultLibraryLogLevel is the least level of dragonboat's and badger's own
// logs that reaches the Logger unless RaftConfig.LibraryLogLevel says
// otherwise: their Info and Debug lines (some 190 per start) are for
// debugging those libraries, not for running kahuna.
const DefaultLibraryLogLevel = slog.LevelWarn

var discard = slog.New(slog.DiscardHandler)

// installRaftLogger points the process-wide library logs at l (if not nil)
// with least level min (nil: DefaultLibraryLogLevel).
func installRaftLogger(l *slog.Logger, min slog.Leveler) {
	if l != nil {
		raftLog.Store(l)
		if min != nil {
			raftLevel.Store(&min)
		} else {
			raftLevel.Store(nil)
		}
	}
	raftLogOnce.Do(func() {
		defer func() {
			// Someone else set the factory first; theirs stays.
			if recover() != nil && l != nil {
				l.Warn("durability: dragonboat logger factory already set elsewhere")
			}
		}()
		dlogger.SetLoggerFactory(func(pkg string) dlogger.ILogger { return raftLogger{pkg: pkg} })
	})
}

// raftLogger adapts dragonboat's per-package logger to slog.
type raftLogger struct{ pkg string }

// SetLevel is ignored: the slog handler decides.
func (raftLogger) SetLevel(dlogger.LogLevel) {}

func (l raftLogger) Debugf(f string, a ...any) { l.log(slog.LevelDebug, f, a) }

// Infof stays Info, below DefaultLibraryLogLevel: dragonboat logs ~50 Info
// lines per start.
func (l raftLogger) Infof(f string, a ...any) { l.log(slog.LevelInfo, f, a) }

func (l raftLogger) Warningf(f string, a ...any) { l.log(l.noisy(slog.LevelWarn, f), f, a) }

func (l raftLogger) Errorf(f string, a ...any) { l.log(l.noisy(slog.LevelError, f), f, a) }

// Panicf must not return: dragonboat relies on it to stop. It calls the
// process's fatal handler (SetFatalHandler) first, if there is one.
func (l raftLogger) Panicf(f string, a ...any) {
	msg := fmt.Sprintf(f, a...)
	if h := fatalHandler.Load(); h != nil {
		(*h)(l.pkg + ": " + msg)
	}
	l.log(slog.LevelError, "%s", []any{msg})
	panic(msg)
}

var fatalHandler atomic.Pointer[func(msg string)]

// SetFatalHandler makes h the process's last word when dragonboat cannot go
// on: a failed Raft log write or fsync, or an error from a state machine
// (a full or failing disk) stops it with a panic from a worker goroutine,
// with no way to recover. h should log one line and exit
// the process; if it returns, the panic follows. cmd/kahuna sets it; an
// embedding program may.
func SetFatalHandler(h func(msg string)) { fatalHandler.Store(&h) }

// noisy downgrades what is routine: election steps, connection churn while
// peers start and stop, read indexes dropped during elections (Barrier
// retries them), and the TLS reminder printed on every start.
func (l raftLogger) noisy(level slog.Level, format string) slog.Level {
	for _, s := range []string{"mutual TLS disabled", "dropped ReadIndex", "dropped read index"} {
		if strings.Contains(format, s) {
			return slog.LevelDebug
		}
	}
	if l.pkg == "raft" {
		// Elections and transfers are routine: dragonboat logs every step
		// of them as a warning.
		for _, s := range []string{"became", "become follower", "received", "vote", "Vote", "campaign", "cast ",
			"dropped proposal", "eaderTransfer", "eader transfer", "leader transferring", "no leader"} {
			if strings.Contains(format, s) {
				return slog.LevelDebug
			}
		}
		return level
	}
	if l.pkg != "transport" {
		return level
	}
	for _, s := range []string{"connect", "connection", "send batch failed", "unreachable", "breaker"} {
		if strings.Contains(format, s) {
			return slog.LevelDebug
		}
	}
	return level
}

func (l raftLogger) log(level slog.Level, f string, a []any) {
	lg := raftLog.Load()
	if lg == nil || !libraryEnabled(lg, level) {
		return
	}
	msg, attrs := partitionAttrs(fmt.Sprintf(f, a...))
	lg.Log(context.Background(), level, msg, append(attrs, "pkg", l.pkg)...)
}

// libraryEnabled reports whether a library line at level goes to lg.
func libraryEnabled(lg *slog.Logger, level slog.Level) bool {
	min := DefaultLibraryLogLevel
	if lv := raftLevel.Load(); lv != nil {
		min = (*lv).Level()
	}
	return level >= min && lg.Enabled(context.Background(), level)
}

// replicaTag is how dragonboat names a replica in its lines: [shard:replica].
var replicaTag = regexp.MustCompile(`\[(\d{5}):(\d{5})\] ?`)

// partitionAttrs takes dragonboat's [shard:replica] tag out of msg and
// returns it as partition (shard − 1, as kahuna numbers them) and replica
// attributes, so a line names the partition an operator knows.
func partitionAttrs(msg string) (string, []any) {
	m := replicaTag.FindStringSubmatchIndex(msg)
	if m == nil {
		return msg, nil
	}
	shard, err1 := strconv.ParseUint(msg[m[2]:m[3]], 10, 64)
	replica, err2 := strconv.ParseUint(msg[m[4]:m[5]], 10, 64)
	if err1 != nil || err2 != nil || shard == 0 {
		return msg, nil
	}
	return msg[:m[0]] + msg[m[1]:], []any{"partition", int(shard - 1), "replica", replica}
}

// badgerLogger passes badger's logs to slog, at or above the library level.
type badgerLogger struct{ l *slog.Logger }

func (b badgerLogger) log(level slog.Level, f string, a []any) {
	if !libraryEnabled(b.l, level) {
		return
	}
	b.l.Log(context.Background(), level, strings.TrimSpace(fmt.Sprintf(f, a...)), "pkg", "badger")
}

func (b badgerLogger) Errorf(f string, a ...any)   { b.log(slog.LevelError, f, a) }
func (b badgerLogger) Warningf(f string, a ...any) { b.log(slog.LevelWarn, f, a) }
func (b badgerLogger) Infof(f string, a ...any)    { b.log(slog.LevelInfo, f, a) }
func (b badgerLogger) Debugf(f string, a ...any)   { b.log(slog.LevelDebug, f, a) }
