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
// It re-runs itself as the server, so both ends are separate processes.
package main

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kahunago/kahuna/bench/peers/internal/closedloop"
	"github.com/kahunago/kahuna/bench/peers/internal/packconn"
	"github.com/kahunago/kahuna/bench/peers/internal/twoproc"
)

const (
	serverEnv = "MAP_FLOOR_SERVE"
	// forgetEnv makes the server forget every lock it grants: a test's
	// negative control, never a flag.
	forgetEnv = "MAP_FLOOR_UNSAFE_FORGET"
)

func main() {
	if os.Getenv(serverEnv) != "" {
		err := serve(os.Getenv(forgetEnv) != "")
		fmt.Fprintln(os.Stderr, "map-floor server:", err)
		os.Exit(1)
	}
	callers := flag.Int("callers", 64, "callers, each with one request in flight")
	conns := flag.Int("conns", 1, "connections the callers share (kahuna's Go client opens one to a node)")
	names := flag.Int("names", 10000, "lock names the callers pick from")
	duration := flag.Duration("duration", 8*time.Second, "measured time")
	warmup := flag.Duration("warmup", 2*time.Second, "time before measuring")
	flag.Parse()
	res, err := run(*callers, *conns, *names, *duration, *warmup, false)
	if err != nil {
		fmt.Fprintln(os.Stderr, "map-floor:", err)
		os.Exit(1)
	}
	fmt.Println(res)
}

// A request is [caller u32][op u8][name u32]; its answer [caller u32][status u8].
const (
	reqLen = 9
	ansLen = 5

	opTryLock byte = 'L'
	opUnlock  byte = 'U'

	statusDone byte = 1 // locked, or unlocked
	statusBusy byte = 2 // held by another caller, or not held by this one
)

// result is one run's ops and their latencies.
type result struct {
	callers, conns int
	duration       time.Duration
	latencies      []time.Duration // per op (TryLock and Unlock), sorted
	busy           int64           // TryLocks answered Busy over the whole run
	wrong          int64           // Unlocks of a lock the caller held answered Busy
}

func (r result) String() string {
	line := fmt.Sprintf("mutex-guarded map over loopback TCP, %d callers on %d connections, %v: %.0f ops/s (a TryLock and an Unlock each), op p50 %v p99 %v, %d TryLocks busy",
		r.callers, r.conns, r.duration, float64(len(r.latencies))/r.duration.Seconds(), closedloop.Quantile(r.latencies, 0.5), closedloop.Quantile(r.latencies, 0.99), r.busy)
	if r.wrong > 0 {
		line += fmt.Sprintf("; WRONG: %d Unlocks of a held lock refused", r.wrong)
	}
	return line
}

func run(callers, nconns, names int, duration, warmup time.Duration, forget bool) (result, error) {
	if callers < 1 || nconns < 1 || names < 1 || duration <= 0 || warmup < 0 {
		return result{}, errors.New("--callers, --conns and --names must be at least 1, --duration positive, --warmup not negative")
	}
	var env []string
	if forget {
		env = append(env, forgetEnv+"=1")
	}
	srv, err := twoproc.Start(serverEnv, env...)
	if err != nil {
		return result{}, err
	}
	defer srv.Stop()

	answers := make([]chan byte, callers)
	for i := range answers {
		answers[i] = make(chan byte, 1)
	}
	broken := closedloop.NewBreakage()
	conns := make([]*packconn.Conn, nconns)
	for i := range conns {
		nc, err := srv.Dial()
		if err != nil {
			return result{}, err
		}
		defer nc.Close()
		conns[i] = packconn.New(nc)
		go closedloop.ReadAnswers(nc, ansLen, broken, func(m []byte) error {
			id := binary.BigEndian.Uint32(m)
			if int(id) >= callers {
				return fmt.Errorf("server answered for caller %d of %d", id, callers)
			}
			answers[id] <- m[4]
			return nil
		})
	}

	var busy, wrong atomic.Int64
	latencies, err := closedloop.Run(callers, closedloop.Window{Warmup: warmup, Duration: duration, Broken: broken}, func(c *closedloop.Caller) bool {
		conn := conns[c.ID%nconns]
		call := func(op byte, name uint32) (byte, bool) {
			var m [reqLen]byte
			binary.BigEndian.PutUint32(m[:], uint32(c.ID))
			m[4] = op
			binary.BigEndian.PutUint32(m[5:], name)
			if conn.Send(m[:]) != nil {
				return 0, false
			}
			return closedloop.Await(answers[c.ID], broken)
		}
		name := uint32(rand.IntN(names))
		t := time.Now()
		s, ok := call(opTryLock, name)
		if !ok {
			return false
		}
		if s == statusBusy {
			busy.Add(1)
		} else {
			if s, ok = call(opUnlock, name); !ok {
				return false
			}
			if s != statusDone {
				wrong.Add(1)
			}
		}
		c.Record(time.Since(t))
		return true
	})
	if err != nil {
		return result{}, err
	}
	return result{callers: callers, conns: nconns, duration: duration, latencies: latencies,
		busy: busy.Load(), wrong: wrong.Load()}, nil
}

// locks is the server's state: each held name and its holder.
type locks struct {
	mu     sync.Mutex
	holder map[string]uint32
	forget bool // see forgetEnv
}

func serve(forget bool) error {
	st := &locks{holder: map[string]uint32{}, forget: forget}
	lis, err := twoproc.Listen()
	if err != nil {
		return err
	}
	for {
		nc, err := lis.Accept()
		if err != nil {
			return err
		}
		go st.serveConn(nc)
	}
}

// serveConn decides every whole request of each read and writes their
// answers together.
func (st *locks) serveConn(nc net.Conn) {
	defer nc.Close()
	buf := make([]byte, 64<<10)
	var (
		have int
		out  []byte
		name []byte
	)
	for {
		n, err := nc.Read(buf[have:])
		if err != nil {
			return
		}
		have += n
		whole := have - have%reqLen
		out = out[:0]
		st.mu.Lock()
		for req := buf[:whole]; len(req) > 0; req = req[reqLen:] {
			id := binary.BigEndian.Uint32(req)
			// A name as a lock service gets it: a string, hashed by the map.
			name = strconv.AppendUint(append(name[:0], "lock-"...), uint64(binary.BigEndian.Uint32(req[5:])), 10)
			status := statusDone
			switch holder, held := st.holder[string(name)]; {
			case req[4] == opTryLock && held:
				status = statusBusy
			case req[4] == opTryLock:
				if !st.forget {
					st.holder[string(name)] = id
				}
			case held && holder == id:
				delete(st.holder, string(name))
			default:
				status = statusBusy
			}
			out = binary.BigEndian.AppendUint32(out, id)
			out = append(out, status)
		}
		st.mu.Unlock()
		have = copy(buf, buf[whole:have])
		if len(out) > 0 {
			if _, err := nc.Write(out); err != nil {
				return
			}
		}
	}
}
