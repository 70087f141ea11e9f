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
	return tryLockResponse(servedFrom(res), res), nil
}

func (g *grpcService) TryExtendLock(ctx context.Context, p *pb.GrpcExtendLockRequest) (*pb.GrpcExtendLockResponse, error) {
	_, res, err := g.s.serve(ctx, g.s.locker, extendRequest(p))
	if err != nil {
		return nil, status.FromContextError(err).Err()
	}
	return extendResponse(servedFrom(res), res), nil
}

func (g *grpcService) Unlock(ctx context.Context, p *pb.GrpcUnlockRequest) (*pb.GrpcUnlockResponse, error) {
	_, res, err := g.s.serve(ctx, g.s.locker, unlockRequest(p))
	if err != nil {
		return nil, status.FromContextError(err).Err()
	}
	return unlockResponse(servedFrom(res), res), nil
}

func (g *grpcService) GetLock(ctx context.Context, p *pb.GrpcGetLockRequest) (*pb.GrpcGetLockResponse, error) {
	info, res, err := g.s.serve(ctx, g.s.locker, getRequest(p))
	if err != nil {
		return nil, status.FromContextError(err).Err()
	}
	return getResponse(servedFrom(res), info, res), nil
}

func (g *grpcService) BatchClientLockRequests(stream grpc.BidiStreamingServer[pb.GrpcBatchClientLockRequest, pb.GrpcBatchClientLockResponse]) error {
	return g.s.serveBatch(stream, g.s.locker)
}

// BatchServerLockRequests is the forwarding stream between nodes; it is
// served by the Forwarded Locker so a forwarded request is never forwarded
// again. Its messages are the client stream's, field for field, and are
// (de)coded alike (see wire.go).
func (g *grpcService) BatchServerLockRequests(stream grpc.BidiStreamingServer[pb.GrpcBatchServerLockRequest, pb.GrpcBatchServerLockResponse]) error {
	return g.s.serveBatch(stream, g.s.forwarded)
}

// noServer is the ServedFrom of an answer served here: present and
// empty, as Kahuna sends it. Shared by every answer; never written.
var noServer = ""

// servedFrom is field 1 of a unary answer: res.ServedFrom, which the node
// sets to the leader's client URL when it forwarded the request.
func servedFrom(res lease.Result) *string {
	if res.ServedFrom == "" {
		return &noServer
	}
	return &res.ServedFrom
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
