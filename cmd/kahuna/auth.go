package main

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/kahunago/kahuna/transport"
)

// tokenFiles are the node's token sets and the files they come from.
type tokenFiles struct {
	auth, peer         *transport.Tokens // nil: no such file
	authFile, peerFile string
}

// loadTokens reads --auth-token-file and --peer-token-file. A file that
// cannot be read or lists no token stops the start: a node meant to
// authenticate must never come up open.
func loadTokens(o options) (tokenFiles, error) {
	tf := tokenFiles{authFile: o.authTokenFile, peerFile: o.peerTokenFile}
	load := func(flag, path string) (*transport.Tokens, error) {
		if path == "" {
			return nil, nil
		}
		tokens, err := transport.LoadTokenFile(path)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", flag, err)
		}
		return transport.NewTokens(tokens...)
	}
	var err error
	if tf.auth, err = load("--auth-token-file", o.authTokenFile); err != nil {
		return tf, err
	}
	if tf.peer, err = load("--peer-token-file", o.peerTokenFile); err != nil {
		return tf, err
	}
	return tf, nil
}

// reload rereads every token file. A file that fails keeps its old set in
// force, and the log says why.
func (tf tokenFiles) reload(logger *slog.Logger) {
	for _, f := range []struct {
		flag, path string
		tokens     *transport.Tokens
	}{{"--auth-token-file", tf.authFile, tf.auth}, {"--peer-token-file", tf.peerFile, tf.peer}} {
		if f.tokens == nil {
			continue
		}
		if err := f.tokens.ReloadTokenFile(f.path); err != nil {
			logger.Error("token reload failed, keeping the old tokens", "flag", f.flag, "file", f.path, "tokens", f.tokens.Len(), "err", err)
			continue
		}
		logger.Info("tokens reloaded", "flag", f.flag, "file", f.path, "tokens", f.tokens.Len())
	}
}

// reloadOnHUP reloads the token files on every SIGHUP until stop is
// called. Without token files SIGHUP is left as it was.
func (tf tokenFiles) reloadOnHUP(logger *slog.Logger) (stop func()) {
	if tf.auth == nil && tf.peer == nil {
		return func() {}
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		for {
			select {
			case <-hup:
				tf.reload(logger)
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(hup)
		close(done)
		<-exited
	}
}
