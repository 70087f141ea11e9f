// Command fifo-floor measures the fastest fair hand-off of one lock between
// processes that Go reaches on this machine: a bare FIFO lock server and
// its contenders, in two processes over loopback TCP, with nothing a lock
// service needs (leases, fencing tokens, names, a wire format, auth,
// metrics). Its figures are the floor under kahuna's hot-wait workload,
// to quote beside kahuna-bench's and Redis's taken in the same sitting.
//
//	go run ./cmd/fifo-floor                       # 64 contenders, 6 s
//	go run ./cmd/fifo-floor --contenders 8 --duration 10s
//	go run ./cmd/fifo-floor --wire grpc           # the same over grpc-go streams
//
// Each contender loops as kahuna-bench's hot-wait does: Lock (it waits in
// the server's queue, oldest first), and at once Unlock. Locks travel on
// one connection and Unlocks on another, as the Go client's LockStream
// and batch stream do. The server reads each connection on one
// goroutine, decides under a mutex, and writes the next holder's grant
// before the releaser's answer, on the reading goroutine: no hand-off to
// another goroutine anywhere on the node's side. The hand-off is timed as
// kahuna-bench times it: from the holder's call of Unlock to the next
// holder's grant.
//
// With --wire grpc the same messages travel as grpc-go stream messages
// (internal/rawgrpc: no encoding), Locks and Unlocks on two streams of one
// connection, as the Go client's LockStream and batch stream share one
// gRPC connection to a node: the floor under kahuna-bench --target grpc.
//
// It re-runs itself as the server, so both ends are separate processes.
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/kahunago/kahuna/bench/peers/internal/closedloop"
	"github.com/kahunago/kahuna/bench/peers/internal/rawgrpc"
	"github.com/kahunago/kahuna/bench/peers/internal/twoproc"
)

const (
	serverEnv = "FIFO_FLOOR_SERVE"
	hopsEnv   = "FIFO_FLOOR_HOPS"
	wireEnv   = "FIFO_FLOOR_WIRE"
	// lifoEnv makes the server grant the newest waiter instead of the
	// oldest: a test's negative control, never a flag.
	lifoEnv = "FIFO_FLOOR_UNSAFE_LIFO"
)

// The wires a run's messages may travel on.
const (
	wireTCP  = "tcp"
	wireGRPC = "grpc"
)

// The hand-offs added (--hops), and their flag's text for the server.
var (
	nodeWorker, nodeWaiter, clientWriter bool
	hopsSet                              string
)

func setHops(list string) error {
	hopsSet = list
	nodeWorker, nodeWaiter, clientWriter = false, false, false
	for _, h := range strings.Split(list, ",") {
		switch strings.TrimSpace(h) {
		case "":
		case "node-worker":
			nodeWorker = true
		case "node-waiter":
			nodeWaiter = true
		case "client-writer":
			clientWriter = true
		default:
			return fmt.Errorf("--hops: unknown hand-off %q (node-worker, node-waiter, client-writer)", h)
		}
	}
	return nil
}

// A message is an op byte and a contender's number.
const (
	opLock     = 'L' // client: queue me
	opUnlock   = 'U' // client: I let go
	opGranted  = 'G' // server: you hold it
	opReleased = 'R' // server: your Unlock is done
	msgLen     = 5
)

func main() {
	if os.Getenv(serverEnv) != "" {
		if err := setHops(os.Getenv(hopsEnv)); err != nil {
			fmt.Fprintln(os.Stderr, "fifo-floor server:", err)
			os.Exit(2)
		}
		err := serve(os.Getenv(wireEnv), os.Getenv(lifoEnv) != "")
		fmt.Fprintln(os.Stderr, "fifo-floor server:", err)
		os.Exit(1)
	}
	contenders := flag.Int("contenders", 64, "contenders for the one lock")
	duration := flag.Duration("duration", 6*time.Second, "measured time")
	warmup := flag.Duration("warmup", 2*time.Second, "time before measuring")
	hops := flag.String("hops", "", "comma-separated goroutine hand-offs to add, as a lock service's layers do: "+
		"node-worker (the server hands each Unlock to a worker goroutine), node-waiter (a waiting Lock's own goroutine, woken by the release, writes its grant), "+
		"client-writer (a writer goroutine writes the client's Unlocks)")
	wire := flag.String("wire", wireTCP, "tcp (bare connections) or grpc (grpc-go streams)")
	flag.Parse()
	if err := setHops(*hops); err != nil {
		fmt.Fprintln(os.Stderr, "fifo-floor:", err)
		os.Exit(2)
	}
	res, err := run(*wire, *contenders, *duration, *warmup, false)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fifo-floor:", err)
		os.Exit(1)
	}
	fmt.Println(res)
}

// result is one run's grants per contender and hand-offs.
type result struct {
	wire     string
	duration time.Duration
	grants   []int
	handoffs []time.Duration // sorted
}

func (r result) total() int {
	n := 0
	for _, g := range r.grants {
		n += g
	}
	return n
}

// jain is Jain's fairness index of the grants per contender: 1 when all
// got as many, 1/N when one got them all.
func (r result) jain() float64 {
	sum, sumSq := 0.0, 0.0
	for _, g := range r.grants {
		sum += float64(g)
		sumSq += float64(g) * float64(g)
	}
	if sumSq == 0 {
		return 0
	}
	return sum * sum / (float64(len(r.grants)) * sumSq)
}

func (r result) quantile(p float64) time.Duration {
	if len(r.handoffs) == 0 {
		return 0
	}
	return r.handoffs[int(p*float64(len(r.handoffs)-1))].Round(100 * time.Nanosecond)
}

func (r result) String() string {
	over := "loopback TCP"
	if r.wire == wireGRPC {
		over = "grpc-go streams"
	}
	return fmt.Sprintf("bare FIFO lock over %s, %d contenders, %v: %.0f grants/s, hand-off p50 %v p90 %v p99 %v, Jain %.3f, 2 requests per grant",
		over, len(r.grants), r.duration, float64(r.total())/r.duration.Seconds(), r.quantile(0.5), r.quantile(0.9), r.quantile(0.99), r.jain())
}

// conn is one connection's (or stream's) sending side; writes from several
// goroutines are whole messages under mu.
type conn struct {
	mu    sync.Mutex
	write func(b []byte) error // b is not kept
}

func tcpConn(c net.Conn) *conn {
	return &conn{write: func(b []byte) error { _, err := c.Write(b); return err }}
}

func grpcConn(st interface{ SendMsg(any) error }) *conn {
	w := rawgrpc.Writer(st)
	return &conn{write: func(b []byte) error { _, err := w.Write(b); return err }}
}

func (c *conn) writeMsgs(b []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.write(b)
}

func appendMsg(b []byte, op byte, id uint32) []byte {
	return binary.BigEndian.AppendUint32(append(b, op), id)
}

func (c *conn) send(op byte, id uint32) error {
	var m [msgLen]byte
	return c.writeMsgs(appendMsg(m[:0], op, id))
}

func run(wire string, contenders int, duration, warmup time.Duration, lifo bool) (result, error) {
	if contenders < 1 || duration <= 0 || warmup < 0 {
		return result{}, errors.New("--contenders must be at least 1, --duration positive, --warmup not negative")
	}
	if wire != wireTCP && wire != wireGRPC {
		return result{}, fmt.Errorf("--wire %q: tcp or grpc", wire)
	}
	env := []string{hopsEnv + "=" + hopsSet, wireEnv + "=" + wire}
	if lifo {
		env = append(env, lifoEnv+"=1")
	}
	srv, err := twoproc.Start(serverEnv, env...)
	if err != nil {
		return result{}, err
	}
	defer srv.Stop()
	broken := closedloop.NewBreakage() // the first reader that fails
	// locks and unlocks send; readLocks and readUnlocks read their
	// answers, started below once the answers' channels are made.
	var locks, unlocks *conn
	var readLocks, readUnlocks func(deliver func([]byte) error)
	switch wire {
	case wireTCP:
		var ncs []net.Conn
		defer func() {
			for _, nc := range ncs {
				nc.Close()
			}
		}()
		dial := func() (*conn, func(func([]byte) error), error) {
			nc, err := srv.Dial()
			if err != nil {
				return nil, nil, err
			}
			ncs = append(ncs, nc)
			return tcpConn(nc), func(d func([]byte) error) { closedloop.ReadAnswers(nc, msgLen, broken, d) }, nil
		}
		if locks, readLocks, err = dial(); err != nil {
			return result{}, err
		}
		if unlocks, readUnlocks, err = dial(); err != nil {
			return result{}, err
		}
	case wireGRPC:
		gc, err := rawgrpc.Dial(srv.Addr)
		if err != nil {
			return result{}, err
		}
		defer gc.Close()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		open := func() (*conn, func(func([]byte) error), error) {
			st, err := gc.Stream(ctx)
			if err != nil {
				return nil, nil, err
			}
			return grpcConn(st), func(d func([]byte) error) { rawgrpc.ReadAnswers(st, msgLen, broken, d) }, nil
		}
		if locks, readLocks, err = open(); err != nil {
			return result{}, err
		}
		if unlocks, readUnlocks, err = open(); err != nil {
			return result{}, err
		}
	}

	sendUnlock := func(id uint32) error { return unlocks.send(opUnlock, id) }
	if clientWriter {
		queue := make(chan uint32, contenders)
		go func() {
			buf := make([]byte, 0, msgLen*contenders)
			for id := range queue {
				buf = appendMsg(buf[:0], opUnlock, id)
				for more := true; more; {
					select {
					case id := <-queue:
						buf = appendMsg(buf, opUnlock, id)
					default:
						more = false
					}
				}
				if unlocks.writeMsgs(buf) != nil {
					return
				}
			}
		}()
		sendUnlock = func(id uint32) error { queue <- id; return nil }
	}
	granted := make([]chan struct{}, contenders)
	released := make([]chan struct{}, contenders)
	for i := range granted {
		granted[i], released[i] = make(chan struct{}, 1), make(chan struct{}, 1)
	}
	deliver := func(m []byte) error {
		id := binary.BigEndian.Uint32(m[1:])
		if int(id) >= contenders {
			return fmt.Errorf("server answered for contender %d of %d", id, contenders)
		}
		switch m[0] {
		case opGranted:
			granted[id] <- struct{}{}
		case opReleased:
			released[id] <- struct{}{}
		default:
			return fmt.Errorf("server sent op %q", m[0])
		}
		return nil
	}
	go readLocks(deliver)
	go readUnlocks(deliver)

	var unlockCalled atomic.Int64 // ns: when the holder called Unlock
	grants := make([]int, contenders)
	// After the window every contender ends after its next grant: the
	// queue drains.
	handoffs, err := closedloop.Run(contenders, closedloop.Window{Warmup: warmup, Duration: duration, Broken: broken}, func(c *closedloop.Caller) bool {
		id := c.ID
		if locks.send(opLock, uint32(id)) != nil {
			return false
		}
		if _, ok := closedloop.Await(granted[id], broken); !ok {
			return false
		}
		if c.Measuring() {
			if at := unlockCalled.Load(); at != 0 {
				c.Record(time.Duration(time.Now().UnixNano() - at))
			}
			grants[id]++
		}
		unlockCalled.Store(time.Now().UnixNano())
		if sendUnlock(uint32(id)) != nil {
			return false
		}
		if _, ok := closedloop.Await(released[id], broken); !ok {
			return false
		}
		return true
	})
	if err != nil {
		return result{}, err
	}
	return result{wire: wire, duration: duration, grants: grants, handoffs: handoffs}, nil
}

// lockState is the server's one lock: its holder and the FIFO of waiters.
type lockState struct {
	lifo    bool // see lifoEnv
	mu      sync.Mutex
	held    bool
	holder  uint32
	waiters []waiter
}

type waiter struct {
	c    *conn
	id   uint32
	wake chan struct{} // node-waiter: the waiting Lock's goroutine writes its grant
}

// serve serves wire until its listener fails (the run kills it first).
func serve(wire string, lifo bool) error {
	lis, err := twoproc.Listen()
	if err != nil {
		return err
	}
	st := &lockState{lifo: lifo}
	if wire == wireGRPC {
		return rawgrpc.Serve(lis, func(gs grpc.ServerStream) error {
			var m rawgrpc.Msg
			return st.serveMsgs(grpcConn(gs), func() ([]byte, error) {
				err := gs.RecvMsg(&m)
				return m.B, err
			})
		})
	}
	for {
		nc, err := lis.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer nc.Close()
			r := bufio.NewReader(nc)
			var m [msgLen]byte
			err := st.serveMsgs(tcpConn(nc), func() ([]byte, error) {
				_, err := io.ReadFull(r, m[:])
				return m[:], err
			})
			if err != nil && !errors.Is(err, io.EOF) {
				fmt.Fprintln(os.Stderr, "fifo-floor server:", err)
			}
		}()
	}
}

// serveMsgs serves the messages next returns, whole ones back to back,
// answering on c.
func (st *lockState) serveMsgs(c *conn, next func() ([]byte, error)) error {
	var work chan uint32
	if nodeWorker {
		work = make(chan uint32, 256)
		defer close(work)
		go func() {
			for id := range work {
				if st.unlock(c, id) != nil {
					return
				}
			}
		}()
	}
	for {
		msgs, err := next()
		if err != nil {
			return err
		}
		if len(msgs)%msgLen != 0 {
			return fmt.Errorf("a message of %d bytes, not of whole %d-byte ones", len(msgs), msgLen)
		}
		for m := msgs; len(m) > 0; m = m[msgLen:] {
			if err := st.serveMsg(c, m[0], binary.BigEndian.Uint32(m[1:]), work); err != nil {
				return err
			}
		}
	}
}

func (st *lockState) serveMsg(c *conn, op byte, id uint32, work chan<- uint32) error {
	switch op {
	case opLock:
		st.mu.Lock()
		if st.held {
			w := waiter{c: c, id: id}
			if nodeWaiter {
				w.wake = make(chan struct{})
				go func() {
					<-w.wake
					_ = w.c.send(opGranted, w.id)
				}()
			}
			st.waiters = append(st.waiters, w)
			st.mu.Unlock()
			return nil
		}
		st.held, st.holder = true, id
		st.mu.Unlock()
		return c.send(opGranted, id)
	case opUnlock:
		if work != nil {
			work <- id
			return nil
		}
		return st.unlock(c, id)
	default:
		return fmt.Errorf("op %q", op)
	}
}

// unlock releases the lock id holds and grants it to the oldest waiter:
// its grant is written first, then the releaser's answer.
func (st *lockState) unlock(c *conn, id uint32) error {
	st.mu.Lock()
	if !st.held || st.holder != id {
		st.mu.Unlock()
		return fmt.Errorf("contender %d unlocked a lock it does not hold", id)
	}
	var next waiter
	switch n := len(st.waiters); {
	case n > 0 && st.lifo:
		next = st.waiters[n-1]
		st.waiters = st.waiters[:n-1]
		st.holder = next.id
	case n > 0:
		next = st.waiters[0]
		st.waiters = st.waiters[1:]
		st.holder = next.id
	default:
		st.held = false
	}
	st.mu.Unlock()
	switch {
	case next.wake != nil:
		close(next.wake)
	case next.c != nil:
		if err := next.c.send(opGranted, next.id); err != nil {
			return err
		}
	}
	return c.send(opReleased, id)
}
