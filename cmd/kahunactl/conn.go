package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"github.com/kahunago/kahuna/admin"
	"github.com/kahunago/kahuna/transport"
)

// conn is how kahunactl reaches the nodes: the bearer token and the TLS
// settings of https:// endpoints, for the lock calls and the admin API
// alike, and whether a failure to reach them is told in full (-v).
type conn struct {
	token   string
	tls     *tls.Config
	verbose bool
}

func newConn(o options) (conn, error) {
	c := conn{token: o.token, tls: &tls.Config{MinVersion: tls.VersionTLS12}, verbose: o.verbose}
	if o.caFile != "" {
		pem, err := os.ReadFile(o.caFile)
		if err != nil {
			return c, fmt.Errorf("--ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return c, fmt.Errorf("--ca-file %s: no PEM certificate in it", o.caFile)
		}
		c.tls.RootCAs = pool
	}
	return c, nil
}

func (c conn) clientOptions() []transport.ClientOption {
	opts := []transport.ClientOption{transport.WithTLSConfig(c.tls)}
	if c.token != "" {
		opts = append(opts, transport.WithToken(c.token))
	}
	return opts
}

// admin is the admin API client with the token, and the CA for https://
// endpoints.
func (c conn) admin() *admin.Client {
	return admin.NewClient(admin.WithTLSConfig(c.tls), admin.WithToken(c.token))
}

type connKey struct{}

// withConn and connFrom carry the conn to the admin commands, whose
// helpers take the context but not the options.
func withConn(ctx context.Context, c conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

func connFrom(ctx context.Context) conn {
	c, ok := ctx.Value(connKey{}).(conn)
	if !ok {
		return conn{tls: &tls.Config{MinVersion: tls.VersionTLS12}}
	}
	return c
}
