package transport

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kahunago/kahuna/lease"
)

// endedStream is a batch stream the server has refused: SendMsg finds it
// ended (io.EOF, as grpc reports a stream the server closed), and RecvMsg
// gives the server's status once released.
type endedStream struct {
	grpc.ClientStream
	status  error
	sent    chan struct{} // closed by the first SendMsg
	once    sync.Once
	release chan struct{} // RecvMsg returns status once closed
}

func (s *endedStream) SendMsg(any) error {
	s.once.Do(func() { close(s.sent) })
	return io.EOF
}

func (s *endedStream) RecvMsg(any) error {
	<-s.release
	return s.status
}

// TestSendToARefusedStreamGivesTheRefusal: Kahuna's batch stream (and a
// kahuna server's, when the client falls back to it) is refused for a bad
// token by its status, which the client reads with RecvMsg; a SendMsg that
// comes first only sees io.EOF. The call must fail with the server's
// reason, ErrUnauthenticated, whichever comes first; it failed with
// "sending to ...: EOF" in about 1 run of 200 of TestAuthGRPC under load
// before. Here SendMsg always comes first: RecvMsg is held until the call
// has had time to be answered wrongly (it is answered at once when it is).
func TestSendToARefusedStreamGivesTheRefusal(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status error
		want   func(error) bool
	}{
		{"refused token", status.Error(codes.Unauthenticated, "no token"), func(err error) bool {
			return errors.Is(err, lease.ErrUnauthenticated) && errors.Is(err, lease.ErrNotApplied)
		}},
		{"shutdown", io.EOF, func(err error) bool {
			return errors.Is(err, errUnsent) && !errors.Is(err, lease.ErrUnauthenticated)
		}},
		{"other status", status.Error(codes.Unavailable, "going away"), func(err error) bool {
			return errors.Is(err, errUnsent) && status.Code(err) == codes.Unavailable
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			fake := &endedStream{status: tc.status, sent: make(chan struct{}), release: make(chan struct{})}
			released := false
			defer func() {
				if !released {
					close(fake.release)
				}
				cancel()
				wg.Wait()
			}()
			s := newBatchStream(ctx, &wg, "fake", nil, batchClientMethod, nil)
			st := &clientStream{ClientStream: fake, cancel: func() {}, pending: make(map[int32]*call)}
			s.cur = st
			wg.Add(1)
			go s.readLoop(st)

			c := newCall()
			c.encode(1, lease.TryLock, "r", []byte("o"), time.Second, lease.Ephemeral)
			done := make(chan error, 1)
			go func() { done <- s.do(context.Background(), c) }()
			<-fake.sent
			var err error
			select {
			case err = <-done: // answered before the server's status was read
			case <-time.After(100 * time.Millisecond):
				close(fake.release)
				released = true
				err = <-done
			}
			if !tc.want(err) {
				t.Fatalf("call on a stream ended with %v: %v", tc.status, err)
			}
		})
	}
}
