package main

import (
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/kahunago/kahuna/admin"
	"github.com/kahunago/kahuna/internal/node"
	"github.com/kahunago/kahuna/internal/testcert"
	"github.com/kahunago/kahuna/transport"
)

// startTLSNode serves an in-memory node over TLS, with a certificate from
// a throwaway CA, asking for token; it returns the https:// URL and the
// CA file.
func startTLSNode(t *testing.T, token string) (string, string) {
	t.Helper()
	n, err := node.Open(node.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	tokens, err := transport.NewTokens(token)
	if err != nil {
		t.Fatal(err)
	}
	srv := transport.NewServer(n, transport.ServerOptions{
		Tokens: tokens,
		Extra:  map[string]http.Handler{admin.PartitionsPath: n.AdminHandler(), admin.TransferPath: n.AdminHandler()},
	})
	dir := t.TempDir()
	ca := testcert.NewCA(t, dir, "private")
	pair := ca.Issue(t, dir, "node", "127.0.0.1")
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.ServeTLS(lis, pair.CertFile, pair.KeyFile) }()
	t.Cleanup(func() {
		srv.Close()
		<-served
	})
	return "https://" + lis.Addr().String(), ca.File
}

func TestTokenAndCAFile(t *testing.T) {
	url, caFile := startTLSNode(t, "s3cret")
	t.Setenv("KAHUNA_TOKEN", "")
	common := []string{"--endpoints", url, "--timeout", "10s"}

	// --token and --ca-file: lock, get and the admin API over TLS.
	r := ctl(t, append([]string{"lock", "tls/a", "--owner", "me", "--token", "s3cret", "--ca-file", caFile}, common...)...).want(t, exitOK, "lock with --token")
	if !strings.Contains(r.stdout, "locked tls/a owner me") {
		t.Fatalf("lock: %s", r)
	}
	ctl(t, append([]string{"partitions", "--token", "s3cret", "--ca-file", caFile}, common...)...).want(t, exitOK, "partitions with --token")

	// KAHUNA_TOKEN when --token is not given.
	t.Setenv("KAHUNA_TOKEN", "s3cret")
	r = ctl(t, append([]string{"get", "tls/a", "--ca-file", caFile}, common...)...).want(t, exitOK, "get with KAHUNA_TOKEN")
	if !strings.Contains(r.stdout, "tls/a owned by me") {
		t.Fatalf("get: %s", r)
	}
	ctl(t, append([]string{"partitions", "--ca-file", caFile}, common...)...).want(t, exitOK, "partitions with KAHUNA_TOKEN")
	// --token wins over KAHUNA_TOKEN.
	r = ctl(t, append([]string{"get", "tls/a", "--ca-file", caFile, "--token", "wrong"}, common...)...).want(t, exitError, "get with a wrong --token")
	if !strings.Contains(r.stderr, "unauthenticated: the node refused the bearer token") || strings.Count(r.stderr, "\n") != 1 {
		t.Fatalf("wrong token: %s", r)
	}

	// No token, or no CA: refused, with the reason.
	t.Setenv("KAHUNA_TOKEN", "")
	r = ctl(t, append([]string{"get", "tls/a", "--ca-file", caFile}, common...)...).want(t, exitError, "get without a token")
	if !strings.Contains(r.stderr, "missing bearer token") {
		t.Fatalf("no token: %s", r)
	}
	r = ctl(t, append([]string{"partitions", "--ca-file", caFile}, common...)...).want(t, exitError, "partitions without a token")
	if !strings.Contains(r.stderr, "401") || !strings.Contains(r.stderr, "missing bearer token") {
		t.Fatalf("admin without a token: %s", r)
	}
	r = ctl(t, append([]string{"get", "tls/a", "--token", "s3cret"}, common...)...).want(t, exitError, "get without --ca-file")
	if !strings.Contains(r.stderr, "certificate") {
		t.Fatalf("no CA: %s", r)
	}
	ctl(t, append([]string{"get", "tls/a", "--ca-file", caFile + ".missing"}, common...)...).want(t, exitUsage, "a missing --ca-file")
}
