package transport

import (
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kahunago/kahuna/lease"
)

// unauthenticated turns a refusal of the call's credentials (gRPC
// Unauthenticated, REST 401) into an error matching
// lease.ErrUnauthenticated, which says why; nil if err is no such
// refusal. The server checks credentials before it processes anything, so
// nothing was applied.
func unauthenticated(target string, err error) error {
	if status.Code(err) != codes.Unauthenticated {
		return nil
	}
	why := err.Error()
	if st, ok := status.FromError(err); ok {
		why = st.Message()
	}
	return fmt.Errorf("%w: %s: %s", lease.ErrUnauthenticated, target, why)
}
