// Command wal-floor measures the fastest durable write service Go reaches
// on this machine's disk and loopback: a bare server that appends each
// request to one file and answers it after an fdatasync, group-committing
// whatever arrived meanwhile, with callers in another process. Its figures
// are the floor under kahuna's persistent lock workload (a TryLock and an
// Unlock, two durable writes, per op), to quote beside kahuna-bench's and
// Redis's (`appendfsync always`) taken in the same sitting.
//
//	go run ./cmd/wal-floor                      # 64 callers, 8 s
//	go run ./cmd/wal-floor --callers 8 --record 128
//
// Each caller loops: write, wait for its answer, write again, wait; that
// pair is one op, as kahuna-bench's lock op is two writes. The server
// reads each connection on its own goroutine; one committer appends the
// records queued since its last round, fdatasyncs the file once, and
// answers them. Nothing else: no Raft, no state machine, no lock state.
//
// It re-runs itself as the server, so both ends are separate processes.
package main

import (
	"bufio"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kahunago/kahuna/bench/peers/internal/closedloop"
	"github.com/kahunago/kahuna/bench/peers/internal/twoproc"
)

const (
	serverEnv = "WAL_FLOOR_SERVE"
	dirEnv    = "WAL_FLOOR_DIR"
	recordEnv = "WAL_FLOOR_RECORD"
	// skipAppendEnv makes the server answer writes it never appended: a
	// test's negative control, never a flag.
	skipAppendEnv = "WAL_FLOOR_UNSAFE_SKIP_APPEND"
	msgLen        = 4 // a caller's number; the answer echoes it
)

func main() {
	if os.Getenv(serverEnv) != "" {
		var size int
		if _, err := fmt.Sscan(os.Getenv(recordEnv), &size); err != nil {
			fmt.Fprintln(os.Stderr, "wal-floor server: record size:", err)
			os.Exit(2)
		}
		err := serve(os.Getenv(dirEnv), size, os.Getenv(skipAppendEnv) != "")
		fmt.Fprintln(os.Stderr, "wal-floor server:", err)
		os.Exit(1)
	}
	callers := flag.Int("callers", 64, "callers, each with one write in flight")
	conns := flag.Int("conns", 1, "connections the callers share (kahuna's Go client opens one to a node)")
	record := flag.Int("record", 96, "bytes appended to the log per write (a kahuna lock record is about this size)")
	duration := flag.Duration("duration", 8*time.Second, "measured time")
	warmup := flag.Duration("warmup", 2*time.Second, "time before measuring")
	dir := flag.String("dir", "", "directory for the log file (default: a temp dir, removed after)")
	flag.Parse()
	res, err := run(*callers, *conns, *record, *duration, *warmup, *dir, false)
	if err != nil {
		fmt.Fprintln(os.Stderr, "wal-floor:", err)
		os.Exit(1)
	}
	fmt.Println(res)
}

// result is one run's writes and their latencies.
type result struct {
	callers   int
	duration  time.Duration
	latencies []time.Duration // per write, sorted
	rounds    uint64          // fdatasyncs during the measured time
	answered  int64           // writes answered over the whole run
}

func (r result) String() string {
	writes := float64(len(r.latencies))
	perSync := 0.0
	if r.rounds > 0 {
		perSync = writes / float64(r.rounds)
	}
	return fmt.Sprintf("group-committed log over loopback TCP, %d callers, %v: %.0f ops/s (two durable writes each), write p50 %v p99 %v, %.1f writes per fdatasync",
		r.callers, r.duration, writes/2/r.duration.Seconds(), closedloop.Quantile(r.latencies, 0.5), closedloop.Quantile(r.latencies, 0.99), perSync)
}

func run(callers, nconns, record int, duration, warmup time.Duration, dir string, skipAppend bool) (result, error) {
	if callers < 1 || nconns < 1 || record < msgLen || duration <= 0 || warmup < 0 {
		return result{}, fmt.Errorf("--callers and --conns must be at least 1, --record at least %d, --duration positive, --warmup not negative", msgLen)
	}
	if dir == "" {
		tmp, err := os.MkdirTemp("", "wal-floor-")
		if err != nil {
			return result{}, err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	env := []string{dirEnv + "=" + dir, fmt.Sprint(recordEnv, "=", record)}
	if skipAppend {
		env = append(env, skipAppendEnv+"=1")
	}
	srv, err := twoproc.Start(serverEnv, env...)
	if err != nil {
		return result{}, err
	}
	defer srv.Stop()

	conns := make([]*clientConn, nconns)
	answers := make([]chan struct{}, callers)
	for i := range answers {
		answers[i] = make(chan struct{}, 1)
	}
	broken := closedloop.NewBreakage()
	for i := range conns {
		nc, err := srv.Dial()
		if err != nil {
			return result{}, err
		}
		defer nc.Close()
		if _, err := nc.Write([]byte{kindWrites}); err != nil {
			return result{}, err
		}
		c := &clientConn{c: nc}
		conns[i] = c
		go closedloop.ReadAnswers(c.c, msgLen, broken, func(m []byte) error {
			id := binary.BigEndian.Uint32(m)
			if int(id) >= callers {
				return fmt.Errorf("server answered for caller %d of %d", id, callers)
			}
			answers[id] <- struct{}{}
			return nil
		})
	}

	var answered atomic.Int64
	var r0, r1 uint64
	window := closedloop.Window{Warmup: warmup, Duration: duration, Broken: broken,
		Opened: func() (err error) { r0, err = readRounds(srv); return err },
		Closed: func() (err error) { r1, err = readRounds(srv); return err },
	}
	latencies, err := closedloop.Run(callers, window, func(c *closedloop.Caller) bool {
		t := time.Now()
		if conns[c.ID%nconns].send(uint32(c.ID)) != nil {
			return false
		}
		if _, ok := closedloop.Await(answers[c.ID], broken); !ok {
			return false
		}
		answered.Add(1)
		c.Record(time.Since(t))
		return true
	})
	if err != nil {
		return result{}, err
	}
	return result{callers: callers, duration: duration, latencies: latencies, rounds: r1 - r0, answered: answered.Load()}, nil
}

type clientConn struct {
	c  net.Conn
	mu sync.Mutex
}

func (c *clientConn) send(id uint32) error {
	var m [msgLen]byte
	binary.BigEndian.PutUint32(m[:], id)
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := c.c.Write(m[:])
	return err
}

// A connection's first byte says what it is for: writes, or one read of
// the server's count of fdatasyncs (8 bytes, then the server closes it).
const (
	kindWrites byte = 'W'
	kindRounds byte = 'R'
)

// readRounds asks the server how many fdatasyncs it has made.
func readRounds(srv *twoproc.Server) (uint64, error) {
	c, err := srv.Dial()
	if err != nil {
		return 0, err
	}
	defer c.Close()
	var b [8]byte
	if _, err := c.Write([]byte{kindRounds}); err != nil {
		return 0, err
	}
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return 0, fmt.Errorf("reading the server's count of fdatasyncs: %w", err)
	}
	return binary.BigEndian.Uint64(b[:]), nil
}

// pending is a write waiting for the committer: who asked, on which
// connection.
type pending struct {
	c  *serverConn
	id uint32
}

type serverConn struct {
	c  net.Conn
	mu sync.Mutex
}

// walLog is the server's one file and its group commit.
type walLog struct {
	f          *os.File
	record     int
	skipAppend bool // see skipAppendEnv
	mu         sync.Mutex
	cond       *sync.Cond
	queue      []pending
}

func serve(dir string, record int, skipAppend bool) error {
	f, err := os.OpenFile(filepath.Join(dir, "log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	lg := &walLog{f: f, record: record, skipAppend: skipAppend}
	lg.cond = sync.NewCond(&lg.mu)
	var rounds atomic.Uint64
	go lg.commit(&rounds)
	lis, err := twoproc.Listen()
	if err != nil {
		return err
	}
	for {
		nc, err := lis.Accept()
		if err != nil {
			return err
		}
		go func() {
			var kind [1]byte
			if _, err := io.ReadFull(nc, kind[:]); err != nil {
				nc.Close()
				return
			}
			if kind[0] == kindRounds {
				_, _ = nc.Write(binary.BigEndian.AppendUint64(nil, rounds.Load()))
				nc.Close()
				return
			}
			lg.read(&serverConn{c: nc})
		}()
	}
}

func (lg *walLog) read(c *serverConn) {
	defer c.c.Close()
	r := bufio.NewReader(c.c)
	var m [msgLen]byte
	for {
		if _, err := io.ReadFull(r, m[:]); err != nil {
			return
		}
		lg.mu.Lock()
		lg.queue = append(lg.queue, pending{c, binary.BigEndian.Uint32(m[:])})
		lg.mu.Unlock()
		lg.cond.Signal()
	}
}

// commit appends every queued write, fdatasyncs once, and answers them;
// writes that arrive meanwhile wait for the next round.
func (lg *walLog) commit(rounds *atomic.Uint64) {
	var (
		batch []pending
		buf   []byte
		pad   = make([]byte, lg.record-msgLen) // a record is the caller's number, padded
		out   = map[*serverConn][]byte{}
	)
	for {
		lg.mu.Lock()
		for len(lg.queue) == 0 {
			lg.cond.Wait()
		}
		batch, lg.queue = lg.queue, batch[:0]
		lg.mu.Unlock()
		buf = buf[:0]
		for _, p := range batch {
			buf = binary.BigEndian.AppendUint32(buf, p.id)
			buf = append(buf, pad...)
		}
		if !lg.skipAppend {
			if _, err := lg.f.Write(buf); err != nil {
				fmt.Fprintln(os.Stderr, "wal-floor server: append:", err)
				os.Exit(1)
			}
			if err := fdatasync(lg.f); err != nil {
				fmt.Fprintln(os.Stderr, "wal-floor server: fdatasync:", err)
				os.Exit(1)
			}
		}
		rounds.Add(1)
		for _, p := range batch {
			out[p.c] = binary.BigEndian.AppendUint32(out[p.c], p.id)
		}
		for c, b := range out {
			c.mu.Lock()
			_, _ = c.c.Write(b)
			c.mu.Unlock()
			out[c] = b[:0]
		}
	}
}
