// Command raft-floor measures the fastest durable write service that
// dragonboat multi-Raft reaches on this machine: member processes, each a
// dragonboat NodeHost with the settings kahuna's durability package uses
// (one LogDB shard, one step worker, a 10 ms tick, CheckQuorum, PreVote,
// kahuna's raftnet transport unless --transport dragonboat), serving
// a bare protocol over loopback TCP, and callers in another process. A
// write is proposed to its shard's leader as a 96-byte record, batched
// with the records queued behind the shard's proposals in flight as
// kahuna's lanes do, and answered once applied to a state machine that
// only counts. No lock state, no badger, no wire format, no forwarding:
// its figures are the floor under kahuna's persistent lock workload on
// the same engine, a single node or a cluster, to quote beside
// kahuna-bench's, Redis's and etcd's taken in the same sitting.
//
//	go run ./cmd/raft-floor                          # 3 members, 8 shards, 64 callers, 8 s
//	go run ./cmd/raft-floor --members 1 --shards 1   # a single node
//
// Each caller loops: pick a shard at random, write to it twice (a TryLock
// and an Unlock of one name are two writes to one partition), each time
// waiting for the answer; that pair is one op. Shards' leaders are spread
// over the members before the run (shard p led by member p mod members),
// and callers write to the leader directly.
//
// It re-runs itself as each member, so every member and the callers are
// separate processes.
package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lni/dragonboat/v4"
	"github.com/lni/dragonboat/v4/client"
	"github.com/lni/dragonboat/v4/config"
	dlogger "github.com/lni/dragonboat/v4/logger"
	sm "github.com/lni/dragonboat/v4/statemachine"

	"github.com/kahunago/kahuna/bench/peers/internal/closedloop"
	"github.com/kahunago/kahuna/bench/peers/internal/packconn"
	"github.com/kahunago/kahuna/raftnet"
)

const (
	memberEnv = "RAFT_FLOOR_MEMBER" // this process is member N (1-based)
	setupEnv  = "RAFT_FLOOR_SETUP"  // the members' settings, see memberSetup
)

func main() {
	if id := os.Getenv(memberEnv); id != "" {
		err := serveMember(id, os.Getenv(setupEnv))
		fmt.Fprintln(os.Stderr, "raft-floor member:", err)
		os.Exit(1)
	}
	var o options
	flag.IntVar(&o.members, "members", 3, "member processes (Raft replicas of every shard)")
	flag.IntVar(&o.shards, "shards", 8, "Raft shards (kahuna's partitions; its cluster default is 8)")
	flag.IntVar(&o.callers, "callers", 64, "callers, each with one write in flight")
	flag.IntVar(&o.record, "record", 96, "bytes proposed per write (a kahuna lock record is about this size)")
	flag.IntVar(&o.inFlight, "in-flight", 4, "proposals in flight per shard (kahuna's lanes keep 4); 0: every write its own proposal, none held back")
	flag.DurationVar(&o.rtt, "rtt", 10*time.Millisecond, "Raft tick (kahuna's default)")
	flag.DurationVar(&o.duration, "duration", 8*time.Second, "measured time")
	flag.DurationVar(&o.warmup, "warmup", 2*time.Second, "time before measuring")
	flag.StringVar(&o.transport, "transport", "kahuna", "Raft transport: kahuna (its raftnet package, as the node uses) or dragonboat (dragonboat's own TCP transport)")
	flag.StringVar(&o.dir, "dir", "", "directory for the members' data (default: a temp dir, removed after)")
	flag.Parse()
	res, err := run(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "raft-floor:", err)
		os.Exit(1)
	}
	fmt.Println(res)
}

type options struct {
	members, shards, callers, record, inFlight int
	rtt, duration, warmup                      time.Duration
	dir                                        string
	transport                                  string // "kahuna" (raftnet) or "dragonboat" (its own TCP)
	// answerUnproposed makes the members answer writes without proposing
	// them: a test's negative control, never a flag.
	answerUnproposed bool
}

// memberSetup is what every member is told: "raft1,raft2,...;client1,...;shards;record;inFlight;rttMs;answerUnproposed;transport;dir".
type memberSetup struct {
	raftAddrs, clientAddrs []string
	shards, record         int
	inFlight               int
	rtt                    time.Duration
	answerUnproposed       bool
	transport              string
	dir                    string
}

func (s memberSetup) String() string {
	return fmt.Sprintf("%s;%s;%d;%d;%d;%d;%t;%s;%s", strings.Join(s.raftAddrs, ","), strings.Join(s.clientAddrs, ","),
		s.shards, s.record, s.inFlight, s.rtt.Milliseconds(), s.answerUnproposed, s.transport, s.dir)
}

func parseSetup(v string) (memberSetup, error) {
	f := strings.SplitN(v, ";", 9)
	if len(f) != 9 {
		return memberSetup{}, fmt.Errorf("setup %q: want 9 fields", v)
	}
	s := memberSetup{raftAddrs: strings.Split(f[0], ","), clientAddrs: strings.Split(f[1], ","), transport: f[7], dir: f[8]}
	var rttMs int
	if _, err := fmt.Sscan(strings.Join(f[2:7], " "), &s.shards, &s.record, &s.inFlight, &rttMs, &s.answerUnproposed); err != nil {
		return memberSetup{}, fmt.Errorf("setup %q: %w", v, err)
	}
	s.rtt = time.Duration(rttMs) * time.Millisecond
	return s, nil
}

// result is one run's writes, their latencies and the members' proposals.
type result struct {
	o         options
	latencies []time.Duration // per write, sorted
	proposals uint64          // proposals the members made during the measured time
	leaders   []int           // shards led by each member at the start
	answered  int64           // writes answered over the whole run
	applied   uint64          // writes the shards' leaders had applied after the run
}

func (r result) String() string {
	writes := float64(len(r.latencies))
	perProposal := 0.0
	if r.proposals > 0 {
		perProposal = writes / float64(r.proposals)
	}
	line := fmt.Sprintf("dragonboat (%s transport), %d members, %d shards (leaders per member %v), %d callers, %v: %.0f ops/s (two durable writes each), write p50 %v p99 %v, %.1f writes per proposal",
		r.o.transport, r.o.members, r.o.shards, r.leaders, r.o.callers, r.o.duration, writes/2/r.o.duration.Seconds(),
		closedloop.Quantile(r.latencies, 0.5), closedloop.Quantile(r.latencies, 0.99), perProposal)
	if uint64(r.answered) > r.applied {
		line += fmt.Sprintf("; WRONG: %d writes answered, %d applied", r.answered, r.applied)
	}
	return line
}

// freeAddrs picks n free loopback addresses, holding each until all are
// picked so that no two are the same. (The members bind them later: an
// outgoing connection could take one in between, and the run then fails
// to start and says so.)
func freeAddrs(n int) ([]string, error) {
	addrs := make([]string, n)
	for i := range addrs {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer lis.Close()
		addrs[i] = lis.Addr().String()
	}
	return addrs, nil
}

func run(o options) (result, error) {
	if o.members < 1 || o.shards < 1 || o.shards > 255 || o.callers < 1 || o.record < msgLen || o.inFlight < 0 ||
		o.rtt < time.Millisecond || o.duration <= 0 || o.warmup < 0 {
		return result{}, fmt.Errorf("--members, --shards (up to 255) and --callers must be at least 1, --record at least %d, --in-flight not negative, --rtt at least 1ms, --duration positive, --warmup not negative", msgLen)
	}
	if o.transport != "kahuna" && o.transport != "dragonboat" {
		return result{}, fmt.Errorf("--transport %q: want kahuna or dragonboat", o.transport)
	}
	if o.dir == "" {
		tmp, err := os.MkdirTemp("", "raft-floor-")
		if err != nil {
			return result{}, err
		}
		defer os.RemoveAll(tmp)
		o.dir = tmp
	}
	addrs, err := freeAddrs(2 * o.members)
	if err != nil {
		return result{}, err
	}
	raftAddrs, clientAddrs := addrs[:o.members], addrs[o.members:]
	setup := memberSetup{raftAddrs: raftAddrs, clientAddrs: clientAddrs, shards: o.shards, record: o.record,
		inFlight: o.inFlight, rtt: o.rtt, answerUnproposed: o.answerUnproposed, transport: o.transport, dir: o.dir}
	self, err := os.Executable()
	if err != nil {
		return result{}, err
	}
	var started []*exec.Cmd
	defer func() {
		for _, cmd := range started { // all at once, so none reports the others' loss
			_ = cmd.Process.Kill()
		}
		for _, cmd := range started {
			_ = cmd.Wait()
		}
	}()
	for i := range o.members {
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), fmt.Sprint(memberEnv, "=", i+1), setupEnv+"="+setup.String())
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			return result{}, fmt.Errorf("starting member %d: %w", i+1, err)
		}
		started = append(started, cmd)
	}

	leaders, err := awaitLeaders(clientAddrs, o.shards, 30*time.Second)
	if err != nil {
		return result{}, err
	}
	perMember := make([]int, o.members)
	for _, m := range leaders {
		perMember[m]++
	}

	conns := make([]*packconn.Conn, o.members)
	answers := make([]chan struct{}, o.callers)
	for i := range answers {
		answers[i] = make(chan struct{}, 1)
	}
	broken := closedloop.NewBreakage()
	for i := range conns {
		nc, err := dial(clientAddrs[i])
		if err != nil {
			return result{}, err
		}
		defer nc.Close()
		if _, err := nc.Write([]byte{kindWrites}); err != nil {
			return result{}, err
		}
		conns[i] = packconn.New(nc)
		go closedloop.ReadAnswers(nc, msgLen, broken, func(m []byte) error {
			switch id := binary.BigEndian.Uint32(m); {
			case id == writeFailed:
				return errors.New("a member failed to commit a write (its error is above: a leader change during the run, or a timeout)")
			case int(id) >= o.callers:
				return fmt.Errorf("member answered for caller %d of %d", id, o.callers)
			default:
				answers[id] <- struct{}{}
				return nil
			}
		})
	}

	proposals := func() (uint64, error) {
		var sum uint64
		for _, a := range clientAddrs {
			n, err := readProposals(a)
			if err != nil {
				return 0, err
			}
			sum += n
		}
		return sum, nil
	}
	var p0, p1 uint64
	var answered atomic.Int64
	window := closedloop.Window{Warmup: o.warmup, Duration: o.duration, Broken: broken,
		Opened: func() (err error) { p0, err = proposals(); return err },
		Closed: func() (err error) { p1, err = proposals(); return err },
	}
	latencies, err := closedloop.Run(o.callers, window, func(c *closedloop.Caller) bool {
		shard := rand.IntN(o.shards)
		conn := conns[leaders[shard]]
		for range 2 {
			t := time.Now()
			var m [1 + msgLen]byte
			m[0] = byte(shard)
			binary.BigEndian.PutUint32(m[1:], uint32(c.ID))
			if conn.Send(m[:]) != nil {
				return false
			}
			if _, ok := closedloop.Await(answers[c.ID], broken); !ok {
				return false
			}
			answered.Add(1)
			c.Record(time.Since(t))
		}
		return true
	})
	if err != nil {
		return result{}, err
	}
	res := result{o: o, latencies: latencies, proposals: p1 - p0, leaders: perMember, answered: answered.Load()}
	for _, a := range clientAddrs {
		n, err := readApplied(a)
		if err != nil {
			return result{}, err
		}
		res.applied += n
	}
	return res, nil
}

// awaitLeaders asks the members until every shard is led by the member
// it was assigned to (p mod members), or, after timeout, by any member,
// and returns each shard's leader (a member's index).
func awaitLeaders(clientAddrs []string, shards int, timeout time.Duration) ([]int, error) {
	deadline := time.Now().Add(timeout)
	for ; ; time.Sleep(50 * time.Millisecond) {
		leaders := make([]int, shards)
		for p := range leaders {
			leaders[p] = -1
		}
		for m, a := range clientAddrs {
			led, err := readLeads(a, shards)
			if err != nil {
				if time.Now().After(deadline) {
					return nil, err
				}
				continue
			}
			for p, yes := range led {
				if yes {
					leaders[p] = m
				}
			}
		}
		spread, known := true, true
		for p, m := range leaders {
			known = known && m >= 0
			spread = spread && m == p%len(clientAddrs)
		}
		if spread || (known && time.Now().After(deadline)) {
			return leaders, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("shards without a leader after %v: %v", timeout, leaders)
		}
	}
}

func dial(addr string) (net.Conn, error) {
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			return c, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("a member did not listen: %w", err)
		}
	}
}

// A connection's first byte says what it is for: writes ([shard][caller]
// in, [caller] out), or one question (then the member closes it).
const (
	kindWrites    byte = 'W'
	kindLeads     byte = 'L'        // one byte a shard: 1 if this member leads it
	kindProposals byte = 'P'        // 8 bytes: proposals made so far
	kindApplied   byte = 'A'        // 8 bytes: writes applied to the shards this member leads
	msgLen             = 4          // a caller's number; the answer echoes it
	writeFailed        = ^uint32(0) // the answer to a write whose proposal failed
)

func ask(addr string, kind byte, n int) ([]byte, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if _, err := c.Write([]byte{kind}); err != nil {
		return nil, err
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		return nil, fmt.Errorf("asking member %s: %w", addr, err)
	}
	return b, nil
}

func readLeads(addr string, shards int) ([]bool, error) {
	b, err := ask(addr, kindLeads, shards)
	if err != nil {
		return nil, err
	}
	led := make([]bool, shards)
	for i, v := range b {
		led[i] = v == 1
	}
	return led, nil
}

func readProposals(addr string) (uint64, error) { return readCount(addr, kindProposals) }

func readApplied(addr string) (uint64, error) { return readCount(addr, kindApplied) }

func readCount(addr string, kind byte) (uint64, error) {
	b, err := ask(addr, kind, 8)
	if err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint64(b), nil
}

// quiet keeps dragonboat's per-package loggers to errors.
type quiet struct{ pkg string }

func (quiet) SetLevel(dlogger.LogLevel)   {}
func (quiet) Debugf(string, ...any)       {}
func (quiet) Infof(string, ...any)        {}
func (quiet) Warningf(string, ...any)     {}
func (q quiet) Errorf(f string, a ...any) { q.print("error", f, a) }
func (q quiet) Panicf(f string, a ...any) {
	q.print("panic", f, a)
	panic(fmt.Sprintf(f, a...))
}
func (q quiet) print(level, f string, a []any) {
	fmt.Fprintf(os.Stderr, "raft-floor member: dragonboat %s %s: %s\n", q.pkg, level, fmt.Sprintf(f, a...))
}

// counter is the state machine: it counts the bytes applied.
type counter struct{ bytes uint64 }

func (c *counter) Update(e sm.Entry) (sm.Result, error) {
	c.bytes += uint64(len(e.Cmd))
	return sm.Result{}, nil
}
func (c *counter) Lookup(any) (any, error) { return c.bytes, nil }
func (c *counter) SaveSnapshot(w io.Writer, _ sm.ISnapshotFileCollection, _ <-chan struct{}) error {
	return binary.Write(w, binary.BigEndian, c.bytes)
}
func (c *counter) RecoverFromSnapshot(r io.Reader, _ []sm.SnapshotFile, _ <-chan struct{}) error {
	return binary.Read(r, binary.BigEndian, &c.bytes)
}
func (c *counter) Close() error { return nil }

// member is one member process's NodeHost and its shards' queues.
type member struct {
	id        uint64
	nh        *dragonboat.NodeHost
	record    int
	lanes     []*lane
	proposals atomic.Uint64
}

func serveMember(idText, setupText string) error {
	var id uint64
	if _, err := fmt.Sscan(idText, &id); err != nil {
		return fmt.Errorf("member number %q: %w", idText, err)
	}
	s, err := parseSetup(setupText)
	if err != nil {
		return err
	}
	dlogger.SetLoggerFactory(func(pkg string) dlogger.ILogger { return quiet{pkg} })
	logdb := config.GetTinyMemLogDBConfig()
	logdb.Shards = 1
	nhc := config.NodeHostConfig{
		NodeHostDir:    filepath.Join(s.dir, fmt.Sprint("member-", id)),
		RTTMillisecond: uint64(s.rtt.Milliseconds()),
		RaftAddress:    s.raftAddrs[id-1],
		Expert: config.ExpertConfig{
			LogDB: logdb,
			Engine: config.EngineConfig{ExecShards: 1, CommitShards: 1, ApplyShards: 1,
				SnapshotShards: 2, CloseShards: 2},
		},
	}
	if s.transport == "kahuna" {
		nhc.Expert.TransportFactory = raftnet.Factory{Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))}
	}
	nh, err := dragonboat.NewNodeHost(nhc)
	if err != nil {
		return fmt.Errorf("starting the NodeHost: %w", err)
	}
	initial := map[uint64]dragonboat.Target{}
	for i, a := range s.raftAddrs {
		initial[uint64(i+1)] = a
	}
	m := &member{id: id, nh: nh, record: s.record}
	for p := range s.shards {
		shardID := uint64(p + 1)
		err := nh.StartReplica(initial, false, func(uint64, uint64) sm.IStateMachine { return &counter{} }, config.Config{
			ReplicaID: id, ShardID: shardID, ElectionRTT: 10, HeartbeatRTT: 1, CheckQuorum: true, PreVote: true,
			SnapshotEntries: 10000, CompactionOverhead: 5000,
		})
		if err != nil {
			return fmt.Errorf("starting shard %d: %w", shardID, err)
		}
		m.lanes = append(m.lanes, &lane{m: m, shardID: shardID, record: s.record, inFlight: s.inFlight,
			session: nh.GetNoOPSession(shardID), answerUnproposed: s.answerUnproposed})
		go m.lead(shardID, uint64(p%len(s.raftAddrs))+1)
	}
	lis, err := net.Listen("tcp", s.clientAddrs[id-1])
	if err != nil {
		return err
	}
	for {
		nc, err := lis.Accept()
		if err != nil {
			return err
		}
		go m.serve(nc)
	}
}

// lead moves the shard's leadership to want once it has a leader (so the
// leaders spread over the members as kahuna's do), and keeps asking
// until it holds.
func (m *member) lead(shardID, want uint64) {
	if want != m.id {
		return
	}
	for {
		leader, _, ok, err := m.nh.GetLeaderID(shardID)
		if err != nil {
			return
		}
		if ok && leader == m.id {
			return
		}
		if ok {
			_ = m.nh.RequestLeaderTransfer(shardID, m.id)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (m *member) serve(nc net.Conn) {
	defer nc.Close()
	var kind [1]byte
	if _, err := io.ReadFull(nc, kind[:]); err != nil {
		return
	}
	switch kind[0] {
	case kindLeads:
		b := make([]byte, len(m.lanes))
		for i, l := range m.lanes {
			if leader, _, ok, err := m.nh.GetLeaderID(l.shardID); err == nil && ok && leader == m.id {
				b[i] = 1
			}
		}
		_, _ = nc.Write(b)
	case kindProposals:
		_, _ = nc.Write(binary.BigEndian.AppendUint64(nil, m.proposals.Load()))
	case kindApplied:
		var bytes uint64
		for _, l := range m.lanes {
			if leader, _, ok, err := m.nh.GetLeaderID(l.shardID); err != nil || !ok || leader != m.id {
				continue
			}
			v, err := m.nh.StaleRead(l.shardID, nil)
			if err != nil {
				fmt.Fprintf(os.Stderr, "raft-floor member %d: reading shard %d: %v\n", m.id, l.shardID, err)
				return
			}
			bytes += v.(uint64)
		}
		_, _ = nc.Write(binary.BigEndian.AppendUint64(nil, bytes/uint64(m.record)))
	case kindWrites:
		c := &serverConn{c: nc}
		r := bufio.NewReader(nc)
		var msg [1 + msgLen]byte
		for {
			if _, err := io.ReadFull(r, msg[:]); err != nil {
				return
			}
			p := int(msg[0])
			if p >= len(m.lanes) {
				fmt.Fprintf(os.Stderr, "raft-floor member: a write to shard %d of %d\n", p, len(m.lanes))
				return
			}
			m.lanes[p].queue(pending{c, binary.BigEndian.Uint32(msg[1:])})
		}
	}
}

type serverConn struct {
	c  net.Conn
	mu sync.Mutex
}

// pending is a write waiting for its proposal: who asked, on which
// connection.
type pending struct {
	c  *serverConn
	id uint32
}

// lane proposes a shard's writes: with inFlight proposals outstanding,
// writes that arrive queue and go out together in the next proposal, as
// kahuna's lanes batch records into Raft entries. inFlight 0 proposes
// every write at once on its own.
type lane struct {
	m        *member
	shardID  uint64
	record   int
	inFlight int
	session  *client.Session // a no-op session, shared by the lane's proposals

	answerUnproposed bool // see options

	mu      sync.Mutex
	waiting []pending
	out     int // proposals in flight
}

func (l *lane) queue(p pending) {
	l.mu.Lock()
	if l.inFlight > 0 && l.out >= l.inFlight {
		l.waiting = append(l.waiting, p)
		l.mu.Unlock()
		return
	}
	l.out++
	l.mu.Unlock()
	go l.propose([]pending{p})
}

// propose proposes batch as one entry, answers it once applied, then
// proposes what queued meanwhile, if anything.
func (l *lane) propose(batch []pending) {
	for len(batch) > 0 {
		cmd := make([]byte, 0, len(batch)*l.record)
		for _, p := range batch {
			cmd = binary.BigEndian.AppendUint32(cmd, p.id)
			cmd = append(cmd, make([]byte, l.record-msgLen)...)
		}
		l.m.proposals.Add(1)
		var (
			rs  *dragonboat.RequestState
			err error
		)
		if !l.answerUnproposed {
			rs, err = l.m.nh.Propose(l.session, cmd, 5*time.Second)
		}
		if err == nil && rs != nil {
			r := <-rs.ResultC()
			rs.Release()
			if !r.Completed() {
				err = fmt.Errorf("proposal not completed (timeout %v, dropped %v, terminated %v)", r.Timeout(), r.Dropped(), r.Terminated())
			}
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "raft-floor member %d: shard %d: %v\n", l.m.id, l.shardID, err)
		}
		answerAll(batch, err == nil)
		l.mu.Lock()
		batch, l.waiting = l.waiting, nil
		if len(batch) == 0 {
			l.out--
		}
		l.mu.Unlock()
	}
}

// answerAll answers a batch's writes, one socket write a connection.
func answerAll(batch []pending, ok bool) {
	out := map[*serverConn][]byte{}
	for _, p := range batch {
		id := p.id
		if !ok {
			id = writeFailed
		}
		out[p.c] = binary.BigEndian.AppendUint32(out[p.c], id)
	}
	for c, b := range out {
		c.mu.Lock()
		_, _ = c.c.Write(b)
		c.mu.Unlock()
	}
}
