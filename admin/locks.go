package admin

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// Query is req as LocksPath's query parameters.
func (req LocksRequest) Query() url.Values {
	q := url.Values{}
	if req.Prefix != "" {
		q.Set("prefix", req.Prefix)
	}
	if req.After != "" {
		q.Set("after", req.After)
	}
	if req.Limit != 0 {
		q.Set("limit", strconv.Itoa(req.Limit))
	}
	if req.Partitions != nil {
		ps := make([]string, len(req.Partitions))
		for i, p := range req.Partitions {
			ps[i] = strconv.Itoa(p)
		}
		q.Set("partitions", strings.Join(ps, ","))
	}
	return q
}

// ParseLocksQuery reads a LocksRequest from LocksPath's query parameters;
// a malformed one is an error matching ErrInvalidList. The node checks
// the values (the limit's range, the prefix's length).
func ParseLocksQuery(q url.Values) (LocksRequest, error) {
	req := LocksRequest{Prefix: q.Get("prefix"), After: q.Get("after")}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			return req, fmt.Errorf("%w: limit %q is not a number", ErrInvalidList, s)
		}
		req.Limit = n
	}
	if s, ok := q["partitions"]; ok {
		req.Partitions = []int{}
		for _, f := range strings.Split(strings.Join(s, ","), ",") {
			if f == "" {
				continue
			}
			p, err := strconv.Atoi(f)
			if err != nil || p < 0 {
				return req, fmt.Errorf("%w: partition %q is not a partition number", ErrInvalidList, f)
			}
			req.Partitions = append(req.Partitions, p)
		}
	}
	return req, nil
}
