package transport

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/kahunago/kahuna/lease"
	v1 "github.com/kahunago/kahuna/transport/kahunav1pb"
)

// FuzzLockStream sends a LockStream a sequence of messages, any of them
// malformed: the server must answer only ids it was sent, each with a
// known status, never more answers than Locks, and end the stream (cleanly
// when every message decoded) rather than hang.
//
//	go test -run X -fuzz FuzzLockStream -fuzztime 10m ./transport
func FuzzLockStream(f *testing.F) {
	enc := func(m *v1.LockStreamRequest) []byte { b, _ := proto.Marshal(m); return b }
	lock := func(id int64, res string, waitMs int64) []byte {
		return enc(&v1.LockStreamRequest{RequestId: id, Lock: &v1.LockRequest{Resource: res, Owner: []byte("o"), TtlMs: 1000, WaitMs: waitMs}})
	}
	f.Add(joinFrames(lock(1, "r", 10), lock(2, "r", 0), enc(&v1.LockStreamRequest{RequestId: 1, Cancel: true})))
	f.Add(joinFrames(lock(1, "r", -1), lock(1, "r", -2), enc(&v1.LockStreamRequest{RequestId: 3}), lock(4, "", 5)))
	f.Add(joinFrames(lock(7, "a", 1<<40), []byte{0xff, 0xff}, lock(8, "b", 0)))
	f.Add(joinFrames())

	fs := startFuzzServer(f)
	f.Fuzz(func(t *testing.T, input []byte) {
		msgs := frames(input)
		locks := map[int64]int{} // id → Locks sent with it
		nLocks, cancels, allDecode := 0, 0, true
		for _, b := range msgs {
			var m v1.LockStreamRequest
			if proto.Unmarshal(b, &m) != nil {
				allDecode = false
				continue
			}
			if m.Cancel {
				cancels++
				continue
			}
			locks[m.RequestId]++
			nLocks++
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		stream, err := fs.conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, v1.Kahuna_LockStream_FullMethodName)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range msgs {
			if stream.SendMsg(b) != nil {
				break // the server ended the stream; Recv says why
			}
		}
		_ = stream.CloseSend()
		answers := 0
		var end error
		for {
			var out []byte
			if end = stream.RecvMsg(&out); end != nil {
				break
			}
			var r v1.LockStreamResponse
			if err := proto.Unmarshal(out, &r); err != nil {
				t.Fatalf("answer does not decode: %v", err)
			}
			if st := lease.Status(r.GetLock().GetStatus()); r.GetLock() == nil || !knownStatus(st) {
				t.Fatalf("answer %v: no lock or an unknown status", &r)
			}
			if locks[r.RequestId] == 0 {
				t.Fatalf("answer to id %d, which no Lock left unanswered (sent %v)", r.RequestId, locks)
			}
			locks[r.RequestId]--
			answers++
		}
		if ctx.Err() != nil {
			t.Fatalf("stream hung: %v", end)
		}
		if allDecode {
			if !errors.Is(end, io.EOF) {
				t.Fatalf("stream of well-formed messages ended with %v", end)
			}
			if cancels == 0 && answers != nLocks {
				t.Fatalf("%d answers to %d Locks", answers, nLocks)
			}
		}
	})
}
