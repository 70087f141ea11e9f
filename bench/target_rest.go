package bench

import (
	"context"
	"fmt"

	"github.com/kahunago/kahuna/transport"
)

// RESTTarget drives a kahuna node (or Kahuna itself) through its REST API,
// /v1/locks/*, with the project's REST client.
func RESTTarget() Target {
	return Target{
		Name:           "rest",
		Aliases:        []string{"kahuna-rest"},
		About:          "a kahuna node over REST (/v1/locks/*) at --endpoints",
		NeedsEndpoints: true,
		Open: func(_ context.Context, s Settings) (System, error) {
			var opts []transport.ClientOption
			if s.Insecure {
				opts = append(opts, transport.WithInsecureSkipVerify())
			}
			c, err := transport.DialREST(s.Endpoints, opts...)
			if err != nil {
				return nil, fmt.Errorf("rest %v: %w", s.Endpoints, err)
			}
			return Shared{L: c, CloseFn: c.Close}, nil
		},
	}
}
