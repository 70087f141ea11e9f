package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"time"

	"github.com/kahunago/kahuna"
)

// explain turns an error from the nodes into one sentence a person can act
// on (which endpoint, what went wrong, what to check), or returns "" when
// it has nothing better to say than the error itself. The transport's
// wording (gRPC status, dial details) stays available under --verbose.
func explain(err error, endpoints []string, timeout time.Duration) string {
	msg := err.Error()
	where := strings.Join(endpoints, ", ")
	if len(endpoints) > 1 {
		where = "any of " + where
	}
	switch {
	case errors.Is(err, syscall.ECONNREFUSED) || strings.Contains(msg, "connection refused"):
		return fmt.Sprintf("cannot reach %s: connection refused — is a kahuna node running there?", where)
	case strings.Contains(msg, "server preface") || strings.Contains(msg, "malformed HTTP response") ||
		strings.Contains(msg, "EOF") && strings.Contains(msg, "no endpoint reachable"):
		return fmt.Sprintf("%s does not answer as a kahuna API port (a Raft port? the API listens on --http-ports, 2070 by default)", where)
	case strings.Contains(msg, "no such host") || strings.Contains(msg, "produced zero addresses"):
		return fmt.Sprintf("cannot resolve the host of %s", where)
	case strings.Contains(msg, "first record does not look like a TLS handshake"):
		return fmt.Sprintf("%s does not speak TLS: use http://, or a node's --https-ports", where)
	case errors.Is(err, context.DeadlineExceeded):
		within := "in time"
		if timeout > 0 {
			within = fmt.Sprintf("within --timeout %v", timeout)
		}
		return fmt.Sprintf("no answer from %s %s (a node that does not answer, or https:// to a port without TLS?)", where, within)
	}
	return ""
}

// errorLine is what kahunactl says of err: the explanation if there is
// one (with the error itself after it when verbose), else the error.
func (p printer) errorLine(err error) string {
	why := explain(err, p.endpoints, p.timeout)
	switch {
	case why == "":
		return oneLine(err)
	case p.verbose:
		return why + " (" + oneLine(err) + ")"
	}
	return why
}

// outage says once that the nodes do not answer a command that waits
// (lock --wait, lock -- CMD, watch), and once that they answer again,
// instead of a wait in silence. It is the notice of kahuna.WithRetryNotice
// and kahuna.WatchRetryNotice. after is how many retries in a row make an
// outage: a partition that changes leader costs one, silently.
type outage struct {
	stderr io.Writer
	what   string // "lock jobs/x", "watch jobs/x"
	out    printer
	after  int
	misses int
	said   bool
}

func (o *outage) notice(err error) {
	if err == nil {
		o.misses = 0
		if o.said {
			fmt.Fprintf(o.stderr, "kahunactl: %s: the nodes answer again\n", o.what)
			o.said = false
		}
		return
	}
	o.misses++
	if !o.said && o.misses >= o.after {
		var se *kahuna.StatusError
		if errors.As(err, &se) && se.Status == kahuna.MustRetry {
			fmt.Fprintf(o.stderr, "kahunactl: %s: the nodes answer MustRetry (starting, or electing or moving the partition); retrying\n", o.what)
		} else {
			fmt.Fprintf(o.stderr, "kahunactl: %s: no answer from the nodes (%s); retrying\n", o.what, o.out.errorLine(err))
		}
		o.said = true
	}
}
