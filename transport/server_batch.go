package transport

import (
	"context"
	"errors"
	"io"
	"sync"

	"google.golang.org/grpc"
)

// serveBatch serves one batch stream. Every message is handled on its own
// goroutine, at most MaxInFlightPerStream at once (further messages wait
// unread, so flow control pushes back on a flooding sender), and answered
// as soon as it is done: answers leave out of order and the sender matches
// them by RequestId. handle returns ok=false when no answer is due.
//
// The stream ends when the sender closes its side (after every received
// message is answered) or breaks (with that error; the rest of the server
// is unaffected), or when the server shuts down: then the messages already
// received are answered, later ones are dropped unprocessed, and the stream
// ends with OK. So a sender that sees a clean end knows that whatever is
// still unanswered was never processed and may be sent again elsewhere.
func serveBatch[Req, Resp any](s *Server, stream grpc.BidiStreamingServer[Req, Resp], handle func(context.Context, *Req) (*Resp, bool)) error {
	ctx := stream.Context()
	var (
		mu       sync.Mutex // orders wg.Add against the drain's wg.Wait
		stopping bool
		sendMu   sync.Mutex // grpc allows one Send at a time
		wg       sync.WaitGroup
	)
	slots := make(chan struct{}, s.opts.MaxInFlightPerStream)
	recvErr := make(chan error, 1)

	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				continue // the next Recv fails
			case <-s.draining:
				continue // dropped unprocessed; the stream is ending
			}
			mu.Lock()
			if stopping {
				mu.Unlock()
				<-slots
				continue
			}
			wg.Add(1)
			mu.Unlock()
			go func() {
				defer func() {
					<-slots
					wg.Done()
				}()
				resp, ok := handle(ctx, m)
				if !ok {
					return
				}
				sendMu.Lock()
				// A failed Send means the stream is broken; Recv reports it.
				_ = stream.Send(resp)
				sendMu.Unlock()
			}()
		}
	}()

	var err error
	select {
	case err = <-recvErr:
	case <-s.draining:
	}
	mu.Lock()
	stopping = true
	mu.Unlock()
	// Every handler started must answer before the stream ends: grpc
	// forbids Send after the handler returns.
	wg.Wait()
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}
