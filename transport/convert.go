package transport

import (
	"time"

	"github.com/kahunago/kahuna/lease"
	pb "github.com/kahunago/kahuna/transport/lockspb"
)

// msToTTL turns the wire's int32 milliseconds into a duration. Values <= 0
// stay <= 0 so lease.Valid rejects them.
func msToTTL(ms int32) time.Duration { return time.Duration(ms) * time.Millisecond }

// ttlToMs rounds a duration up to whole milliseconds, so a positive ttl
// below 1 ms does not turn into the invalid 0 on the wire. The caller has
// checked ttl <= lease.MaxTTL, which fits an int32 of milliseconds.
func ttlToMs(ttl time.Duration) int32 {
	return int32((ttl + time.Millisecond - 1) / time.Millisecond)
}

func tryLockRequest(p *pb.GrpcTryLockRequest) lease.Request {
	return lease.Request{Op: lease.TryLock, Resource: p.GetResource(), Owner: p.GetOwner(),
		TTL: msToTTL(p.GetExpiresMs()), Durability: lease.Durability(p.GetDurability())}
}

func extendRequest(p *pb.GrpcExtendLockRequest) lease.Request {
	return lease.Request{Op: lease.Extend, Resource: p.GetResource(), Owner: p.GetOwner(),
		TTL: msToTTL(p.GetExpiresMs()), Durability: lease.Durability(p.GetDurability())}
}

func unlockRequest(p *pb.GrpcUnlockRequest) lease.Request {
	return lease.Request{Op: lease.Unlock, Resource: p.GetResource(), Owner: p.GetOwner(),
		Durability: lease.Durability(p.GetDurability())}
}

func getRequest(p *pb.GrpcGetLockRequest) lease.Request {
	return lease.Request{Op: lease.Get, Resource: p.GetResource(), Durability: lease.Durability(p.GetDurability())}
}

// servedFrom is field 1 (see servedFrom in server_grpc.go); a shared
// pointer: nothing writes through it.
func tryLockResponse(servedFrom *string, res lease.Result) *pb.GrpcTryLockResponse {
	return &pb.GrpcTryLockResponse{ServedFrom: servedFrom,
		Type: pb.GrpcLockResponseType(res.Status), FencingToken: res.FencingToken}
}

func extendResponse(servedFrom *string, res lease.Result) *pb.GrpcExtendLockResponse {
	return &pb.GrpcExtendLockResponse{ServedFrom: servedFrom,
		Type: pb.GrpcLockResponseType(res.Status), FencingToken: res.FencingToken}
}

func unlockResponse(servedFrom *string, res lease.Result) *pb.GrpcUnlockResponse {
	return &pb.GrpcUnlockResponse{ServedFrom: servedFrom, Type: pb.GrpcLockResponseType(res.Status)}
}

// getResponse carries the lock's details only for Got, as Kahuna does: a
// client must not read an owner or token off a lock that does not exist.
func getResponse(servedFrom *string, info lease.LockInfo, res lease.Result) *pb.GrpcGetLockResponse {
	r := &pb.GrpcGetLockResponse{ServedFrom: servedFrom, Type: pb.GrpcLockResponseType(res.Status)}
	if res.Status == lease.Got {
		r.Owner = info.Owner
		r.ExpiresPhysical = info.Expires.UnixMilli()
		r.FencingToken = info.FencingToken
	}
	return r
}
