package node

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/kahunago/kahuna/transport"
)

// peerSecret is the cluster secret this node presents to its peers
// (Config.PeerTokens, else Config.AuthTokens), read on every new
// forwarding stream so a reload is picked up; nil when there is none.
func (c Config) peerSecret() func() string {
	t := c.PeerTokens
	if t == nil {
		t = c.AuthTokens
	}
	if t == nil {
		return nil
	}
	return t.Primary
}

// peerDialOptions are the forwarding client's options besides
// WithForwarding: the cluster secret and, with peer TLS, this node's
// certificate and the cluster CA.
func (c Config) peerDialOptions() ([]transport.ClientOption, error) {
	var opts []transport.ClientOption
	if src := c.peerSecret(); src != nil {
		opts = append(opts, transport.WithTokenSource(src))
	}
	if c.peerTLS() {
		tc, err := PeerTLSConfig(c.PeerCertFile, c.PeerKeyFile, c.PeerCAFile)
		if err != nil {
			return nil, err
		}
		opts = append(opts, transport.WithTLSConfig(tc))
	}
	return opts, nil
}

// PeerTLSConfig loads a member's certificate and the cluster CA for the
// links between members: as a client it presents the certificate and
// verifies the server against the CA; as a server (cmd/kahuna's peer
// port) it presents the same certificate and requires a client
// certificate the CA signed. TLS 1.2 at least.
func PeerTLSConfig(certFile, keyFile, caFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("peer certificate %s, key %s: %w", certFile, keyFile, err)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("peer CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("peer CA %s: no PEM certificate in it", caFile)
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		RootCAs:      pool,
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
	}, nil
}

// adminTimeout bounds an admin request between members that its caller
// did not bound tighter.
const adminTimeout = 30 * time.Second

// adminClient is the HTTP client of admin requests between members
// (membership changes, joining, transfers passed on, the balancer's
// health check). With peer TLS it trusts the cluster CA besides the
// system's roots, so a member whose API is served over https with a
// certificate from the private CA is reached, and presents this member's
// certificate.
func (c Config) adminClient() (*http.Client, error) {
	hc := &http.Client{}
	if !c.peerTLS() {
		return hc, nil
	}
	tc, err := PeerTLSConfig(c.PeerCertFile, c.PeerKeyFile, c.PeerCAFile)
	if err != nil {
		return nil, err
	}
	roots, err := x509.SystemCertPool()
	if err != nil || roots == nil {
		roots = x509.NewCertPool()
	}
	pem, err := os.ReadFile(c.PeerCAFile)
	if err != nil {
		return nil, fmt.Errorf("peer CA: %w", err)
	}
	roots.AppendCertsFromPEM(pem)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots, Certificates: tc.Certificates}
	hc.Transport = tr
	return hc, nil
}
