package peers

import (
	"flag"

	"github.com/kahunago/kahuna/bench"
)

// Options are the peers' own flags, registered next to kahuna-bench's.
type Options struct {
	// StartServer makes each peer target start its own server on a free
	// loopback port (and stop it afterwards) instead of connecting.
	StartServer bool

	RedisAddr              string
	RedisServer            string // redis-server binary
	RedisAppendfsyncAlways bool   // started server: AOF fsynced on every write

	EtcdEndpoints string // comma-separated
	EtcdServer    string // etcd binary

	KahunaServer string // kahuna binary, for grpc and rest with --start-server
}

// Register adds the flags to fs (bench.Program.Flags).
func (o *Options) Register(fs *flag.FlagSet) {
	fs.BoolVar(&o.StartServer, "start-server", false, "redis, etcd: start a server of their own on a free loopback port for the run (temp data dir, removed afterwards)")
	fs.StringVar(&o.RedisAddr, "redis-addr", "127.0.0.1:6379", "redis: server address (without --start-server)")
	fs.StringVar(&o.RedisServer, "redis-server", "redis-server", "redis: the server binary --start-server runs")
	fs.BoolVar(&o.RedisAppendfsyncAlways, "redis-appendfsync-always", false, "redis with --start-server: append-only file fsynced on every write (durable), instead of no persistence")
	fs.StringVar(&o.EtcdEndpoints, "etcd-endpoints", "http://127.0.0.1:2379", "etcd: comma-separated client URLs (without --start-server)")
	fs.StringVar(&o.EtcdServer, "etcd-server", "etcd", "etcd: the server binary --start-server runs")
	fs.StringVar(&o.KahunaServer, "kahuna-server", "kahuna", "grpc, native, rest with --start-server and no --endpoints: the node binary to run (go build -o /tmp/kahuna ./cmd/kahuna)")
}

// Targets is kahuna-bench's registry plus redis and etcd, configured by o;
// its wire targets (grpc, native, rest) can start their own node too.
func Targets(o *Options) bench.Registry {
	reg := bench.DefaultTargets()
	for i, t := range reg {
		if t.NeedsEndpoints || t.Name == "grpc" || t.Name == "native" {
			reg[i] = withServer(t, o)
		}
	}
	return append(reg, RedisTarget(o), EtcdTarget(o))
}
