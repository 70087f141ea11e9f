package admin

// Member is one node of a cluster as its members and clients reach it
// (kahuna.Config.Members).
type Member struct {
	RaftAddress string // host:port of its Raft listener
	Endpoint    string // its API URL, e.g. "http://10.0.0.2:2070", for forwarding and the admin API
	// PeerEndpoint, if set, is where other members forward lock calls:
	// the member's native gRPC listener, "http://host:port" in cleartext or
	// "https://host:port" for its mutual-TLS peer port (cmd/kahuna
	// --peer-port). "" forwards to Endpoint.
	PeerEndpoint string
}
