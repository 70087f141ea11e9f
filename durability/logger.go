package durability

import (
	"context"
	"fmt"
	"log/slog"
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
)

var discard = slog.New(slog.DiscardHandler)

func installRaftLogger(l *slog.Logger) {
	if l != nil {
		raftLog.Store(l)
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

// Infof goes to Debug: dragonboat logs ~50 Info lines per start.
func (l raftLogger) Infof(f string, a ...any) { l.log(slog.LevelDebug, f, a) }

func (l raftLogger) Warningf(f string, a ...any) { l.log(l.noisy(slog.LevelWarn, f), f, a) }

func (l raftLogger) Errorf(f string, a ...any) { l.log(l.noisy(slog.LevelError, f), f, a) }

// Panicf must not return: dragonboat relies on it to stop.
func (l raftLogger) Panicf(f string, a ...any) {
	msg := fmt.Sprintf(f, a...)
	l.log(slog.LevelError, "%s", []any{msg})
	panic(msg)
}

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
		for _, s := range []string{"became", "received", "vote", "Vote", "campaign", "dropped proposal", "eaderTransfer", "eader transfer", "leader transferring"} {
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
	if lg == nil || !lg.Enabled(context.Background(), level) {
		return
	}
	lg.Log(context.Background(), level, fmt.Sprintf(f, a...), "pkg", l.pkg)
}

// badgerLogger passes badger's warnings and errors to slog.
type badgerLogger struct{ l *slog.Logger }

func (b badgerLogger) Errorf(f string, a ...any) {
	b.l.Error(strings.TrimSpace(fmt.Sprintf(f, a...)), "pkg", "badger")
}

func (b badgerLogger) Warningf(f string, a ...any) {
	b.l.Warn(strings.TrimSpace(fmt.Sprintf(f, a...)), "pkg", "badger")
}

func (badgerLogger) Infof(string, ...any)  {}
func (badgerLogger) Debugf(string, ...any) {}
