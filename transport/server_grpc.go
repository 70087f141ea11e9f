package transport

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/kahunago/kahuna/lease"
	pb "github.com/kahunago/kahuna/transport/lockspb"
)

// grpcService implements Kahuna's Locker service on top of Server.serve.
type grpcService struct {
	pb.UnimplementedLockerServer
	s *Server
}

func (g *grpcService) TryLock(ctx context.Context, p *pb.GrpcTryLockRequest) (*pb.GrpcTryLockResponse, error) {
	_, res, err := g.s.serve(ctx, g.s.locker, tryLockRequest(p))
	if err != nil {
		return nil, status.FromContextError(err).Err()
	}
	return tryLockResponse(&g.s.opts.NodeName, res), nil
}

func (g *grpcService) TryExtendLock(ctx context.Context, p *pb.GrpcExtendLockRequest) (*pb.GrpcExtendLockResponse, error) {
	_, res, err := g.s.serve(ctx, g.s.locker, extendRequest(p))
	if err != nil {
		return nil, status.FromContextError(err).Err()
	}
	return extendResponse(&g.s.opts.NodeName, res), nil
}

func (g *grpcService) Unlock(ctx context.Context, p *pb.GrpcUnlockRequest) (*pb.GrpcUnlockResponse, error) {
	_, res, err := g.s.serve(ctx, g.s.locker, unlockRequest(p))
	if err != nil {
		return nil, status.FromContextError(err).Err()
	}
	return unlockResponse(&g.s.opts.NodeName, res), nil
}

func (g *grpcService) GetLock(ctx context.Context, p *pb.GrpcGetLockRequest) (*pb.GrpcGetLockResponse, error) {
	info, res, err := g.s.serve(ctx, g.s.locker, getRequest(p))
	if err != nil {
		return nil, status.FromContextError(err).Err()
	}
	return getResponse(&g.s.opts.NodeName, info, res), nil
}

func (g *grpcService) BatchClientLockRequests(stream grpc.BidiStreamingServer[pb.GrpcBatchClientLockRequest, pb.GrpcBatchClientLockResponse]) error {
	return serveBatch(g.s, stream, func(ctx context.Context, m *pb.GrpcBatchClientLockRequest) (*pb.GrpcBatchClientLockResponse, bool) {
		return g.s.clientEnvelope(ctx, g.s.locker, m)
	})
}

// BatchServerLockRequests is the forwarding stream between nodes; it is
// served by the Forwarded Locker so a forwarded request is never forwarded
// again.
func (g *grpcService) BatchServerLockRequests(stream grpc.BidiStreamingServer[pb.GrpcBatchServerLockRequest, pb.GrpcBatchServerLockResponse]) error {
	return serveBatch(g.s, stream, func(ctx context.Context, m *pb.GrpcBatchServerLockRequest) (*pb.GrpcBatchServerLockResponse, bool) {
		return g.s.serverEnvelope(ctx, g.s.forwarded, m)
	})
}

// envelope is what the client and the server batch requests share.
type envelope interface {
	GetRequestId() int32
	GetTryLock() *pb.GrpcTryLockRequest
	GetExtendLock() *pb.GrpcExtendLockRequest
	GetUnlock() *pb.GrpcUnlockRequest
	GetGetLock() *pb.GrpcGetLockRequest
}

// batchOp maps a batch message type to its op. GrpcClientBatchType and
// GrpcServerBatchType number the ops alike. ok is false for TYPE_NONE and
// unknown values.
func batchOp(typ int32) (_ lease.Op, ok bool) {
	switch typ {
	case 1:
		return lease.TryLock, true
	case 2:
		return lease.Extend, true
	case 3:
		return lease.Unlock, true
	case 4:
		return lease.Get, true
	}
	return lease.TryLock, false
}

// envelopeRequest reads the request out of a batch message of type typ.
// A message whose type is TYPE_NONE or unknown, or whose payload is missing
// or of another op, becomes an empty request, which serve answers
// InvalidInput for its RequestId. (Kahuna logs and drops such a message,
// which leaves its sender waiting forever.) The op of that answer is the
// one named by the type, else by the payload, else TryLock.
func (s *Server) envelopeRequest(typ int32, m envelope) request {
	op, known := batchOp(typ)
	if known {
		switch op {
		case lease.TryLock:
			if p := m.GetTryLock(); p != nil {
				return tryLockRequest(p)
			}
		case lease.Extend:
			if p := m.GetExtendLock(); p != nil {
				return extendRequest(p)
			}
		case lease.Unlock:
			if p := m.GetUnlock(); p != nil {
				return unlockRequest(p)
			}
		case lease.Get:
			if p := m.GetGetLock(); p != nil {
				return getRequest(p)
			}
		}
	} else {
		switch {
		case m.GetExtendLock() != nil:
			op = lease.Extend
		case m.GetUnlock() != nil:
			op = lease.Unlock
		case m.GetGetLock() != nil:
			op = lease.Get
		}
	}
	s.log.Debug("invalid batch message", "type", typ, "requestId", m.GetRequestId())
	return request{op: op}
}

// clientEnvelope serves one message of the client batch stream; the answer
// echoes Type and RequestId and carries the payload of the request's op.
// ok is false when the stream's context ended and no answer is due.
func (s *Server) clientEnvelope(ctx context.Context, l lease.Locker, m *pb.GrpcBatchClientLockRequest) (_ *pb.GrpcBatchClientLockResponse, ok bool) {
	r := s.envelopeRequest(int32(m.GetType()), m)
	info, res, err := s.serve(ctx, l, r)
	if err != nil {
		return nil, false
	}
	out := &pb.GrpcBatchClientLockResponse{Type: m.GetType(), RequestId: m.GetRequestId()}
	switch r.op {
	case lease.TryLock:
		out.Payload = &pb.GrpcBatchClientLockResponse_TryLock{TryLock: tryLockResponse(&s.opts.NodeName, res)}
	case lease.Extend:
		out.Payload = &pb.GrpcBatchClientLockResponse_ExtendLock{ExtendLock: extendResponse(&s.opts.NodeName, res)}
	case lease.Unlock:
		out.Payload = &pb.GrpcBatchClientLockResponse_Unlock{Unlock: unlockResponse(&s.opts.NodeName, res)}
	case lease.Get:
		out.Payload = &pb.GrpcBatchClientLockResponse_GetLock{GetLock: getResponse(&s.opts.NodeName, info, res)}
	}
	return out, true
}

// serverEnvelope is clientEnvelope for the forwarding stream's types.
func (s *Server) serverEnvelope(ctx context.Context, l lease.Locker, m *pb.GrpcBatchServerLockRequest) (_ *pb.GrpcBatchServerLockResponse, ok bool) {
	r := s.envelopeRequest(int32(m.GetType()), m)
	info, res, err := s.serve(ctx, l, r)
	if err != nil {
		return nil, false
	}
	out := &pb.GrpcBatchServerLockResponse{Type: m.GetType(), RequestId: m.GetRequestId()}
	switch r.op {
	case lease.TryLock:
		out.Payload = &pb.GrpcBatchServerLockResponse_TryLock{TryLock: tryLockResponse(&s.opts.NodeName, res)}
	case lease.Extend:
		out.Payload = &pb.GrpcBatchServerLockResponse_ExtendLock{ExtendLock: extendResponse(&s.opts.NodeName, res)}
	case lease.Unlock:
		out.Payload = &pb.GrpcBatchServerLockResponse_Unlock{Unlock: unlockResponse(&s.opts.NodeName, res)}
	case lease.Get:
		out.Payload = &pb.GrpcBatchServerLockResponse_GetLock{GetLock: getResponse(&s.opts.NodeName, info, res)}
	}
	return out, true
}
