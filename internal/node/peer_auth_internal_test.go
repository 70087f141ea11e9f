package node

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/kahunago/kahuna/internal/testcert"
)

// With peer TLS, the admin client between members (the balancer's health
// check, membership changes) reaches a member whose API is served over
// https with a certificate of the private cluster CA; without it, such a
// member is refused as signed by an unknown authority.
func TestAdminClientTrustsClusterCA(t *testing.T) {
	dir := t.TempDir()
	ca := testcert.NewCA(t, dir, "cluster")
	server := ca.Issue(t, dir, "node2", "127.0.0.1")
	client := ca.Issue(t, dir, "node1", "127.0.0.1")
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{server.TLS(t)}}
	srv.StartTLS()
	defer srv.Close()

	plain, err := Config{}.adminClient()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.Get(srv.URL); err == nil {
		t.Fatal("a client without the cluster CA trusted the private certificate")
	}
	peer, err := Config{PeerCertFile: client.CertFile, PeerKeyFile: client.KeyFile, PeerCAFile: ca.File}.adminClient()
	if err != nil {
		t.Fatal(err)
	}
	resp, err := peer.Get(srv.URL)
	if err != nil {
		t.Fatalf("admin client with the cluster CA: %v", err)
	}
	resp.Body.Close()
}
