package bench

import (
	"context"
	"fmt"

	"github.com/kahunago/kahuna/transport"
)

// GRPCTarget drives a kahuna node (or Kahuna itself) through the gRPC
// Locker service, with the project's own client. One client serves every
// worker, as an application would share it.
func GRPCTarget() Target {
	return Target{
		Name:           "grpc",
		Aliases:        []string{"kahuna-grpc"},
		About:          "a kahuna node over gRPC at --endpoints (http:// = h2c, https://)",
		NeedsEndpoints: true,
		Open: func(ctx context.Context, s Settings) (System, error) {
			var opts []transport.ClientOption
			if s.Insecure {
				opts = append(opts, transport.WithInsecureSkipVerify())
			}
			c, err := transport.Dial(ctx, s.Endpoints, opts...)
			if err != nil {
				return nil, fmt.Errorf("dial %v: %w", s.Endpoints, err)
			}
			return Shared{L: c, CloseFn: c.Close}, nil
		},
	}
}
