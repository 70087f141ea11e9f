package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kahunago/kahuna"
)

// options are the parsed command line, in Kahuna's spelling where one exists.
type options struct {
	host                 string
	httpPorts            []int
	grpcPorts            []int
	httpsPorts           []int
	certFile, keyFile    string
	storagePath          string
	walPath              string
	partitions           int
	lockActors           int
	cacheEntryTTL        time.Duration
	cacheEntriesToRemove int
	ephemeralFencingOnly bool
	logLevel             slog.Level
	raftLogLevel         slog.Level
	raftHost             string
	raftPort             int
	raftRTT              time.Duration
	balanceCooldown      time.Duration
	releasedRetention    time.Duration
	diskReserve          string
	storeQuota           string
	nodeID               uint64
	members              map[uint64]kahuna.Member
	clusterState         kahuna.ClusterState
	clusterToken         string
	authTokenFile        string // --auth-token-file (auth.go)
	peerTokenFile        string
	metricsAuth          bool
	peerCert, peerKey    string
	peerCA               string
	peerPort             int // 0: no peer listener
}

// dataHome is where a node keeps its data unless told otherwise:
// $KAHUNA_HOME, else $XDG_DATA_HOME/kahuna, else ~/.local/share/kahuna.
func dataHome() (string, error) {
	if h := os.Getenv("KAHUNA_HOME"); h != "" {
		return h, nil
	}
	if x := os.Getenv("XDG_DATA_HOME"); x != "" {
		return filepath.Join(x, "kahuna"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no data dir: set KAHUNA_HOME or --storage-path (%w)", err)
	}
	return filepath.Join(home, ".local", "share", "kahuna"), nil
}

// errVersion is parseFlags' answer to --version: print the version, run
// nothing.
var errVersion = errors.New("version requested")

// parseFlags parses args (without the program name). Output goes to out.
func parseFlags(args []string, out io.Writer) (options, error) {
	fs := flag.NewFlagSet("kahuna", flag.ContinueOnError)
	// The flag package would print the whole usage on any error; the
	// caller prints one line instead, and -h still gets the usage.
	fs.SetOutput(io.Discard)
	var (
		o                              options
		httpPorts, grpcPorts, tlsPorts string
		cacheTTLSeconds                int
		logLevel, raftLogLevel         string
	)
	fs.StringVar(&o.host, "host", "127.0.0.1", "address the API listeners bind to (0.0.0.0 for every interface)")
	fs.StringVar(&httpPorts, "http-ports", "2070", "comma-separated ports serving REST (HTTP/1.1) and gRPC (h2c) on one listener")
	fs.StringVar(&grpcPorts, "grpc-cleartext-ports", "2072", "comma-separated ports serving native cleartext gRPC (empty = none)")
	fs.StringVar(&tlsPorts, "https-ports", "2071", "comma-separated TLS ports (used only with --https-certificate)")
	fs.StringVar(&o.certFile, "https-certificate", "", "TLS certificate (PEM); enables the --https-ports")
	fs.StringVar(&o.keyFile, "https-certificate-key", "", "TLS private key (PEM) for --https-certificate")
	fs.StringVar(&o.storagePath, "storage-path", "", "data dir for the Raft log and lock store (default $KAHUNA_HOME/data, else $XDG_DATA_HOME/kahuna/data, else ~/.local/share/kahuna/data)")
	fs.StringVar(&o.walPath, "wal-path", "", "optional dir for the Raft WAL, on a low-latency device (default: inside --storage-path)")
	fs.IntVar(&o.partitions, "initial-cluster-partitions", 0, "number of partitions (Raft shards), 1..1024; fixed once the data dir is created. Default: the data dir's count, else 1 for a single node and 8 for a cluster")
	fs.IntVar(&o.lockActors, "locks-workers", 0, "number of lock actors (0 = default)")
	fs.IntVar(&cacheTTLSeconds, "cache-entry-ttl", 1800, "seconds an idle cached lock entry is kept before it may be evicted")
	fs.IntVar(&o.cacheEntriesToRemove, "cache-entries-to-remove", 100, "most entries one eviction pass removes")
	fs.BoolVar(&o.ephemeralFencingOnly, "ephemeral-fencing-only", false, "after a leader change, serve at once instead of waiting out the old leader's ephemeral leases (up to the longest ephemeral TTL): available sooner, but two owners may then hold an ephemeral lock and only fencing tokens tell them apart")
	fs.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&raftLogLevel, "raft-log-level", "warn", "least level of the Raft libraries' own logs (dragonboat, pebble, badger) passed to the log, which --log-level filters again")
	fs.StringVar(&o.raftHost, "raft-host", "127.0.0.1", "host of this node's Raft listener")
	fs.IntVar(&o.raftPort, "raft-port", 2073, "port of this node's Raft listener")
	fs.StringVar(&o.diskReserve, "disk-reserve", kahuna.DefaultDiskReserve, "free space to keep on the data (and WAL) dir's file system, a size (512MiB, 1GB) or a share (5%); below it new persistent locks are refused (MustRetry, with the reason) until it is 5% above again, and the node refuses to start; 0 keeps none")
	fs.StringVar(&o.storeQuota, "store-quota", "", "most bytes the data (and WAL) dir may hold, a size (2GiB); over it new persistent locks are refused; empty or 0: no quota")
	fs.DurationVar(&o.releasedRetention, "released-retention", kahuna.DefaultReleasedRetention, "how long a free persistent lock's record (unlocked, or its lease ended) is kept before the partition's leader removes it; fencing tokens stay monotonic through the partition's token floor; 0 or negative keeps records forever")
	fs.DurationVar(&o.balanceCooldown, "leader-balance-cooldown", kahuna.DefaultLeaderBalanceCooldown, "leader balancing: a partition moves to a member leading 2 fewer only after its leader has been unchanged this long, and at most once per cooldown; 0 or negative turns balancing off")
	fs.DurationVar(&o.raftRTT, "raft-rtt", 10*time.Millisecond, "Raft tick, whole milliseconds, the same on every member (a member of another is refused; to change it, see docs/raft-timing.md): heartbeat every tick, election after 10 silent ticks; raise it (e.g. 50ms) when cluster nodes share a small machine")
	var initialCluster, initialEndpoints string
	addProfileFlags(fs) // pprof.go
	fs.Uint64Var(&o.nodeID, "raft-nodeid", 1, "this node's ID in --initial-cluster")
	fs.StringVar(&initialCluster, "initial-cluster", "", "every member's Raft address, e.g. 1=127.0.0.1:2073,2=127.0.0.1:3073,3=127.0.0.1:4073 (empty = single node)")
	fs.StringVar(&initialEndpoints, "initial-cluster-endpoints", "", "every member's API URL, e.g. 1=http://127.0.0.1:2070,2=http://127.0.0.1:3070,3=http://127.0.0.1:4070")
	var clusterState string
	fs.StringVar(&clusterState, "initial-cluster-state", "", "new: found a new cluster (give it to every member on its first start only); existing: refuse to start on a data dir without Raft state (a lost disk). A node with data restarts from it either way. Default: new for a single node, existing for a cluster member")
	fs.StringVar(&o.clusterToken, "initial-cluster-token", "", "keeps clusters apart: Raft messages of a cluster with another token or member list are dropped. Recorded in the data dir; default: none (the member list alone)")
	var peerEndpoints string
	fs.StringVar(&peerEndpoints, "initial-cluster-peer-endpoints", "", "every member's forwarding URL: its --peer-port, e.g. 1=https://10.0.0.1:2074,... (default: --initial-cluster-endpoints; required with --peer-cert)")
	fs.StringVar(&o.authTokenFile, "auth-token-file", "", "file of bearer tokens (one a line, # comments): the lock and admin APIs refuse calls without one; reloaded on SIGHUP. Default: no authentication")
	fs.StringVar(&o.peerTokenFile, "peer-token-file", "", "file holding the cluster secret (the same on every member): the first token is sent when forwarding, any listed one accepted on the forwarding stream; reloaded on SIGHUP. Default: the --auth-token-file serves as the secret")
	fs.BoolVar(&o.metricsAuth, "metrics-auth", false, "with --auth-token-file, /metrics needs a token too (default: open, like /healthz)")
	fs.StringVar(&o.peerCert, "peer-cert", "", "this member's certificate (PEM) for mutual TLS between members: Raft and forwarding; needs --peer-key and --peer-ca")
	fs.StringVar(&o.peerKey, "peer-key", "", "private key (PEM) of --peer-cert")
	fs.StringVar(&o.peerCA, "peer-ca", "", "CA (PEM) that signs every member's --peer-cert; any certificate it signed is taken for a member, so use one for this cluster only")
	fs.IntVar(&o.peerPort, "peer-port", 0, "port serving native gRPC over mutual TLS (--peer-cert) for forwarding between members (0 = none)")
	showVersion := fs.Bool("version", false, "print the version (module version and VCS revision) and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(out, "Usage: kahuna [flags]\n\nRuns a kahuna lock node: a single node with no flags (REST and gRPC on\n127.0.0.1:2070, native gRPC on 2072, Raft on 2073, data under the user's data\ndir), or a cluster member with --initial-cluster. Flags:\n\n")
			fs.SetOutput(out)
			fs.PrintDefaults()
		}
		return o, err
	}
	if *showVersion {
		return o, errVersion
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	explicit := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	var errs []error
	var err error
	if o.httpPorts, err = parsePorts("--http-ports", httpPorts); err != nil {
		errs = append(errs, err)
	}
	if o.grpcPorts, err = parsePorts("--grpc-cleartext-ports", grpcPorts); err != nil {
		errs = append(errs, err)
	}
	if o.httpsPorts, err = parsePorts("--https-ports", tlsPorts); err != nil {
		errs = append(errs, err)
	}
	if (o.certFile == "") != (o.keyFile == "") {
		errs = append(errs, errors.New("--https-certificate and --https-certificate-key go together"))
	}
	if o.certFile == "" {
		o.httpsPorts = nil
	}
	if len(o.httpPorts)+len(o.grpcPorts)+len(o.httpsPorts) == 0 {
		errs = append(errs, errors.New("no listener: give --http-ports, --grpc-cleartext-ports or --https-ports"))
	}
	if explicit["initial-cluster-partitions"] && (o.partitions < 1 || o.partitions > 1024) {
		errs = append(errs, fmt.Errorf("--initial-cluster-partitions must be 1..1024, got %d", o.partitions))
	}
	if o.lockActors < 0 {
		errs = append(errs, fmt.Errorf("--locks-workers must be ≥ 0, got %d", o.lockActors))
	}
	if cacheTTLSeconds < 1 {
		errs = append(errs, fmt.Errorf("--cache-entry-ttl must be ≥ 1 second, got %d", cacheTTLSeconds))
	}
	o.cacheEntryTTL = time.Duration(cacheTTLSeconds) * time.Second
	if o.cacheEntriesToRemove < 1 {
		errs = append(errs, fmt.Errorf("--cache-entries-to-remove must be ≥ 1, got %d", o.cacheEntriesToRemove))
	}
	if err := o.logLevel.UnmarshalText([]byte(logLevel)); err != nil {
		errs = append(errs, fmt.Errorf("--log-level: %q is not debug, info, warn or error", logLevel))
	}
	if err := o.raftLogLevel.UnmarshalText([]byte(raftLogLevel)); err != nil {
		errs = append(errs, fmt.Errorf("--raft-log-level: %q is not debug, info, warn or error", raftLogLevel))
	}
	if o.raftRTT < time.Millisecond || o.raftRTT > time.Second || o.raftRTT%time.Millisecond != 0 {
		errs = append(errs, fmt.Errorf("--raft-rtt must be whole milliseconds between 1ms and 1s, got %v", o.raftRTT))
	}
	if o.raftPort < 1 || o.raftPort > 65535 {
		errs = append(errs, fmt.Errorf("--raft-port must be 1..65535, got %d", o.raftPort))
	}
	if o.raftHost == "" {
		errs = append(errs, errors.New("--raft-host must not be empty"))
	}
	if net.ParseIP(o.host) == nil && o.host != "localhost" {
		errs = append(errs, fmt.Errorf("--host %q is not an IP address or localhost", o.host))
	}
	if o.nodeID == 0 {
		errs = append(errs, errors.New("--raft-nodeid must be ≥ 1"))
	}
	switch o.clusterState = kahuna.ClusterState(clusterState); o.clusterState {
	case "", kahuna.ClusterStateNew, kahuna.ClusterStateExisting:
	default:
		errs = append(errs, fmt.Errorf("--initial-cluster-state must be new or existing, got %q", clusterState))
	}
	if n := countSet(o.peerCert, o.peerKey, o.peerCA); n != 0 && n != 3 {
		errs = append(errs, errors.New("--peer-cert, --peer-key and --peer-ca go together"))
	}
	if o.peerPort < 0 || o.peerPort > 65535 {
		errs = append(errs, fmt.Errorf("--peer-port must be 1..65535, got %d", o.peerPort))
	} else if o.peerPort != 0 && o.peerCert == "" {
		errs = append(errs, errors.New("--peer-port serves mutual TLS: give --peer-cert, --peer-key and --peer-ca"))
	}
	if o.metricsAuth && o.authTokenFile == "" {
		errs = append(errs, errors.New("--metrics-auth needs --auth-token-file"))
	}
	if initialCluster != "" || initialEndpoints != "" {
		o.members, err = parseMembers(initialCluster, initialEndpoints, peerEndpoints)
		if err != nil {
			errs = append(errs, err)
		} else if m, ok := o.members[o.nodeID]; !ok {
			errs = append(errs, fmt.Errorf("--raft-nodeid %d is not in --initial-cluster", o.nodeID))
		} else if want := net.JoinHostPort(o.raftHost, strconv.Itoa(o.raftPort)); m.RaftAddress != want {
			errs = append(errs, fmt.Errorf("--initial-cluster gives node %d the Raft address %s but --raft-host/--raft-port say %s", o.nodeID, m.RaftAddress, want))
		}
	}
	if len(errs) > 0 {
		return o, errors.Join(errs...)
	}
	if o.storagePath == "" {
		home, err := dataHome()
		if err != nil {
			return o, err
		}
		o.storagePath = filepath.Join(home, "data")
	}
	return o, nil
}

// parseMembers reads "1=host:port,2=..." and "1=http://host:port,2=...",
// and the optional peer endpoints alike.
func parseMembers(cluster, endpoints, peerEndpoints string) (map[uint64]kahuna.Member, error) {
	raft, err := parseIDMap("--initial-cluster", cluster)
	if err != nil {
		return nil, err
	}
	api, err := parseIDMap("--initial-cluster-endpoints", endpoints)
	if err != nil {
		return nil, err
	}
	peer := map[uint64]string{}
	if peerEndpoints != "" {
		if peer, err = parseIDMap("--initial-cluster-peer-endpoints", peerEndpoints); err != nil {
			return nil, err
		}
		for id := range peer {
			if _, ok := raft[id]; !ok {
				return nil, fmt.Errorf("--initial-cluster has no Raft address for node %d of --initial-cluster-peer-endpoints", id)
			}
		}
	}
	members := map[uint64]kahuna.Member{}
	for id, addr := range raft {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("--initial-cluster: node %d: %q is not host:port", id, addr)
		}
		ep, ok := api[id]
		if !ok {
			return nil, fmt.Errorf("--initial-cluster-endpoints has no URL for node %d", id)
		}
		members[id] = kahuna.Member{RaftAddress: addr, Endpoint: ep, PeerEndpoint: peer[id]}
	}
	for id := range api {
		if _, ok := raft[id]; !ok {
			return nil, fmt.Errorf("--initial-cluster has no Raft address for node %d", id)
		}
	}
	return members, nil
}

func countSet(ss ...string) int {
	n := 0
	for _, s := range ss {
		if s != "" {
			n++
		}
	}
	return n
}

func parseIDMap(name, s string) (map[uint64]string, error) {
	m := map[uint64]string{}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		k, v, ok := strings.Cut(f, "=")
		id, err := strconv.ParseUint(k, 10, 64)
		if !ok || err != nil || id == 0 || v == "" {
			return nil, fmt.Errorf("%s: %q is not ID=ADDRESS with ID ≥ 1", name, f)
		}
		if _, dup := m[id]; dup {
			return nil, fmt.Errorf("%s: node %d given twice", name, id)
		}
		m[id] = v
	}
	if len(m) == 0 {
		return nil, fmt.Errorf("%s is empty", name)
	}
	return m, nil
}

func parsePorts(name, s string) ([]int, error) {
	var ports []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		p, err := strconv.Atoi(f)
		if err != nil || p < 1 || p > 65535 {
			return nil, fmt.Errorf("%s: %q is not a port (1..65535)", name, f)
		}
		ports = append(ports, p)
	}
	return ports, nil
}
