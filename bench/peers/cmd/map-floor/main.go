// Command map-floor measures the fastest in-memory lock service Go serves
// on this machine: a bare server holding lock names in a mutex-guarded map,
// and callers in another process over loopback TCP, with nothing else a
// lock service needs (leases, fencing tokens, a wire format, auth,
// metrics, lock actors). Its figures are the floor under kahuna's
// ephemeral lock workload, to quote beside kahuna-bench's and Redis's
// taken in the same sitting.
//
//	go run ./cmd/map-floor                        # 64 callers, 10,000 names, 8 s
//	go run ./cmd/map-floor --conns 64             # a connection per caller, as Redis's clients
//	go run ./cmd/map-floor --wire grpc            # the same over grpc-go streams
//
// Each caller loops as kahuna-bench's lock workload does: TryLock a name
// picked at random, then Unlock it (an op), each time waiting for the
// answer. Callers share --conns connections; on each, one writer goroutine
// sends whatever requests have gathered in one socket write, as kahuna's Go
// client packs its callers' requests. The server reads each connection on
// one goroutine, decides every request of a read under the map's mutex,
// and writes all their answers in one write: no hand-off to another
// goroutine on its side.
//
// With --wire grpc the same bytes travel as grpc-go stream messages
// (internal/rawgrpc: no encoding), one stream a connection, as kahuna's Go
// client keeps one batch stream to a node: each writer's gather is one
// message, and the server decides a message's requests on the stream's
// goroutine and sends their answers as one message. That is the floor under
// kahuna-bench --target grpc: what grpc-go alone costs (HTTP/2 framing,
// flow control, its reader and writer goroutines), with kahuna's
// flow-control windows.
//
// It re-runs itself as the server, so both ends are separate processes.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"time"

	"google.golang.org/grpc"

	"github.com/kahunago/kahuna/bench/peers/internal/closedloop"
	"github.com/kahunago/kahuna/bench/peers/internal/maplocks"
	"github.com/kahunago/kahuna/bench/peers/internal/packconn"
	"github.com/kahunago/kahuna/bench/peers/internal/rawgrpc"
	"github.com/kahunago/kahuna/bench/peers/internal/twoproc"
)

const (
	serverEnv = "MAP_FLOOR_SERVE"
	wireEnv   = "MAP_FLOOR_WIRE"
	// forgetEnv makes the server forget every lock it grants: a test's
	// negative control, never a flag.
	forgetEnv = "MAP_FLOOR_UNSAFE_FORGET"
)

func main() {
	if os.Getenv(serverEnv) != "" {
		err := serve(os.Getenv(wireEnv), os.Getenv(forgetEnv) != "")
		fmt.Fprintln(os.Stderr, "map-floor server:", err)
		os.Exit(1)
	}
	callers := flag.Int("callers", 64, "callers, each with one request in flight")
	conns := flag.Int("conns", 1, "connections the callers share (kahuna's Go client opens one to a node)")
	names := flag.Int("names", 10000, "lock names the callers pick from")
	duration := flag.Duration("duration", 8*time.Second, "measured time")
	warmup := flag.Duration("warmup", 2*time.Second, "time before measuring")
	wire := flag.String("wire", wireTCP, "tcp (bare connections) or grpc (a grpc-go stream a connection)")
	flag.Parse()
	res, err := run(*wire, *callers, *conns, *names, *duration, *warmup, false)
	if err != nil {
		fmt.Fprintln(os.Stderr, "map-floor:", err)
		os.Exit(1)
	}
	fmt.Println(res)
}

// The wires a run's requests may travel on.
const (
	wireTCP  = "tcp"
	wireGRPC = "grpc"
)

func run(wire string, callers, nconns, names int, duration, warmup time.Duration, forget bool) (maplocks.Result, error) {
	if callers < 1 || nconns < 1 || names < 1 || duration <= 0 || warmup < 0 {
		return maplocks.Result{}, errors.New("--callers, --conns and --names must be at least 1, --duration positive, --warmup not negative")
	}
	if wire != wireTCP && wire != wireGRPC {
		return maplocks.Result{}, fmt.Errorf("--wire %q: tcp or grpc", wire)
	}
	env := []string{wireEnv + "=" + wire}
	if forget {
		env = append(env, forgetEnv+"=1")
	}
	srv, err := twoproc.Start(serverEnv, env...)
	if err != nil {
		return maplocks.Result{}, err
	}
	defer srv.Stop()

	answers := make([]chan byte, callers)
	for i := range answers {
		answers[i] = make(chan byte, 1)
	}
	broken := closedloop.NewBreakage()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	conns := make([]*packconn.Conn, nconns)
	for i := range conns {
		switch wire {
		case wireTCP:
			nc, err := srv.Dial()
			if err != nil {
				return maplocks.Result{}, err
			}
			defer nc.Close()
			conns[i] = packconn.New(nc)
			go closedloop.ReadAnswers(nc, maplocks.AnsLen, broken, maplocks.Deliver(answers))
		case wireGRPC:
			gc, err := rawgrpc.Dial(srv.Addr)
			if err != nil {
				return maplocks.Result{}, err
			}
			defer gc.Close()
			st, err := gc.Stream(ctx)
			if err != nil {
				return maplocks.Result{}, err
			}
			conns[i] = packconn.New(rawgrpc.Writer(st))
			go rawgrpc.ReadAnswers(st, maplocks.AnsLen, broken, maplocks.Deliver(answers))
		}
	}

	w := &maplocks.Workload{Names: names}
	latencies, err := closedloop.Run(callers, closedloop.Window{Warmup: warmup, Duration: duration, Broken: broken}, func(c *closedloop.Caller) bool {
		conn := conns[c.ID%nconns]
		return w.Op(c, func(op byte, name uint32) (byte, bool) {
			var m [maplocks.ReqLen]byte
			if conn.Send(maplocks.AppendRequest(m[:0], uint32(c.ID), op, name)) != nil {
				return 0, false
			}
			return closedloop.Await(answers[c.ID], broken)
		})
	})
	if err != nil {
		return maplocks.Result{}, err
	}
	over := "loopback TCP"
	if wire == wireGRPC {
		over = "grpc-go, one stream a connection"
	}
	return w.Result(over, callers, nconns, duration, latencies), nil
}

func serve(wire string, forget bool) error {
	table := maplocks.NewTable(forget)
	lis, err := twoproc.Listen()
	if err != nil {
		return err
	}
	if wire == wireGRPC {
		return rawgrpc.Serve(lis, func(st grpc.ServerStream) error {
			var in rawgrpc.Msg
			for {
				if err := st.RecvMsg(&in); err != nil {
					return err
				}
				out, used := table.Decide(nil, in.B) // grpc keeps out until written
				if used != len(in.B) {
					return fmt.Errorf("a request message of %d bytes", len(in.B))
				}
				if err := st.SendMsg(&rawgrpc.Msg{B: out}); err != nil {
					return err
				}
			}
		})
	}
	for {
		nc, err := lis.Accept()
		if err != nil {
			return err
		}
		go serveConn(table, nc)
	}
}

// serveConn decides every whole request of each read and writes their
// answers together.
func serveConn(table *maplocks.Table, nc net.Conn) {
	defer nc.Close()
	buf := make([]byte, 64<<10)
	var (
		have int
		out  []byte
	)
	for {
		n, err := nc.Read(buf[have:])
		if err != nil {
			return
		}
		have += n
		var used int
		out, used = table.Decide(out[:0], buf[:have])
		have = copy(buf, buf[used:have])
		if len(out) > 0 {
			if _, err := nc.Write(out); err != nil {
				return
			}
		}
	}
}
