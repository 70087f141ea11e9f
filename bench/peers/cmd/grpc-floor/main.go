// Command grpc-floor measures the fastest in-memory lock service Go serves
// over grpc-go on this machine: map-floor's mutex-guarded map of lock
// names behind one bidirectional gRPC stream per connection, with callers
// in another process. Its figures are the floor under kahuna's ephemeral
// lock workload over gRPC (kahuna-bench --target grpc), to quote beside
// kahuna-bench's, map-floor's and Redis's taken in the same sitting: what
// grpc-go alone costs, with nothing a lock service adds.
//
//	go run ./cmd/grpc-floor                        # 64 callers, 10,000 names, 8 s
//
// Each caller loops as kahuna-bench's lock workload does: TryLock a name
// picked at random, then Unlock it (an op), each time waiting for the
// answer. Callers share --conns connections, each with one stream, as
// kahuna's Go client keeps one batch stream to a node. On each, one
// writer goroutine sends whatever requests have gathered, after one
// yield, as one stream message; one reader goroutine receives the answers.
// The server decides every request of a message under the map's mutex on
// the stream's goroutine and sends their answers as one message. Messages
// are map-floor's bytes, passed through by a codec that does no encoding:
// no protobuf, no auth, no metrics, the server and the client options
// kahuna sets that bear on throughput (flow-control windows) set alike.
//
// It re-runs itself as the server, so both ends are separate processes.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/kahunago/kahuna/bench/peers/internal/closedloop"
	"github.com/kahunago/kahuna/bench/peers/internal/maplocks"
	"github.com/kahunago/kahuna/bench/peers/internal/rawgrpc"
	"github.com/kahunago/kahuna/bench/peers/internal/twoproc"
)

const (
	serverEnv = "GRPC_FLOOR_SERVE"
	// forgetEnv makes the server forget every lock it grants: a test's
	// negative control, never a flag.
	forgetEnv = "GRPC_FLOOR_UNSAFE_FORGET"
)

func main() {
	if os.Getenv(serverEnv) != "" {
		err := serve(os.Getenv(forgetEnv) != "")
		fmt.Fprintln(os.Stderr, "grpc-floor server:", err)
		os.Exit(1)
	}
	callers := flag.Int("callers", 64, "callers, each with one request in flight")
	conns := flag.Int("conns", 1, "connections the callers share, one stream each (kahuna's Go client keeps one to a node)")
	names := flag.Int("names", 10000, "lock names the callers pick from")
	duration := flag.Duration("duration", 8*time.Second, "measured time")
	warmup := flag.Duration("warmup", 2*time.Second, "time before measuring")
	flag.Parse()
	res, err := run(*callers, *conns, *names, *duration, *warmup, false)
	if err != nil {
		fmt.Fprintln(os.Stderr, "grpc-floor:", err)
		os.Exit(1)
	}
	fmt.Println(res)
}

func run(callers, nconns, names int, duration, warmup time.Duration, forget bool) (maplocks.Result, error) {
	if callers < 1 || nconns < 1 || names < 1 || duration <= 0 || warmup < 0 {
		return maplocks.Result{}, errors.New("--callers, --conns and --names must be at least 1, --duration positive, --warmup not negative")
	}
	var env []string
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
	streams := make([]*sender, nconns)
	for i := range streams {
		conn, err := rawgrpc.Dial(srv.Addr)
		if err != nil {
			return maplocks.Result{}, err
		}
		defer conn.Close()
		st, err := conn.Stream(ctx)
		if err != nil {
			return maplocks.Result{}, err
		}
		streams[i] = newSender(st, broken)
		go rawgrpc.ReadAnswers(st, maplocks.AnsLen, broken, maplocks.Deliver(answers))
	}

	w := &maplocks.Workload{Names: names}
	latencies, err := closedloop.Run(callers, closedloop.Window{Warmup: warmup, Duration: duration, Broken: broken}, func(c *closedloop.Caller) bool {
		s := streams[c.ID%nconns]
		return w.Op(c, func(op byte, name uint32) (byte, bool) {
			s.send(uint32(c.ID), op, name)
			return closedloop.Await(answers[c.ID], broken)
		})
	})
	if err != nil {
		return maplocks.Result{}, err
	}
	return w.Result("grpc-go, one stream a connection", callers, nconns, duration, latencies), nil
}

// sender gathers its callers' requests and sends them from one goroutine,
// after one yield, as one message, as packconn does on a bare connection.
type sender struct {
	st      grpc.ClientStream
	broken  *closedloop.Breakage
	mu      sync.Mutex
	pending []byte
	wake    chan struct{}
}

func newSender(st grpc.ClientStream, broken *closedloop.Breakage) *sender {
	s := &sender{st: st, broken: broken, wake: make(chan struct{}, 1)}
	go s.writer()
	return s
}

func (s *sender) send(caller uint32, op byte, name uint32) {
	s.mu.Lock()
	s.pending = maplocks.AppendRequest(s.pending, caller, op, name)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *sender) writer() {
	for range s.wake {
		runtime.Gosched()
		s.mu.Lock()
		b := s.pending
		s.pending = nil // grpc keeps b until it is written
		s.mu.Unlock()
		if len(b) == 0 { // its requests went out with the last wake's
			continue
		}
		if err := s.st.SendMsg(&rawgrpc.Msg{B: b}); err != nil {
			s.broken.Fail(fmt.Errorf("sending: %w", err))
			return
		}
	}
}

func serve(forget bool) error {
	table := maplocks.NewTable(forget)
	lis, err := twoproc.Listen()
	if err != nil {
		return err
	}
	return rawgrpc.Serve(lis, func(st grpc.ServerStream) error {
		var in rawgrpc.Msg
		for {
			if err := st.RecvMsg(&in); err != nil {
				return err
			}
			out, used := table.Decide(nil, in.B)
			if used != len(in.B) {
				return fmt.Errorf("a request message of %d bytes", len(in.B))
			}
			if err := st.SendMsg(&rawgrpc.Msg{B: out}); err != nil {
				return err
			}
		}
	})
}
