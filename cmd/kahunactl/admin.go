package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/kahunago/kahuna"
)

// adminClient talks to a node's admin API over HTTP/1.1 (REST port),
// trusting cc's CA for https://.
func adminClient(cc conn, endpoint string) (*http.Client, string) {
	c := &http.Client{}
	if strings.HasPrefix(endpoint, "https://") {
		c.Transport = &http.Transport{TLSClientConfig: cc.tls.Clone()}
	}
	return c, strings.TrimSuffix(endpoint, "/")
}

func partitions(ctx context.Context, o options, out printer, stderr io.Writer) int {
	var body struct {
		Node       uint64                 `json:"node"`
		Partitions []kahuna.PartitionInfo `json:"partitions"`
	}
	if code := adminCall(ctx, o.endpoints, http.MethodGet, kahuna.AdminPartitionsPath, nil, &body, stderr); code != exitOK {
		return code
	}
	if out.json {
		_ = json.NewEncoder(out.w).Encode(body)
		return exitOK
	}
	fmt.Fprintf(out.w, "as seen by node %d:\n", body.Node)
	for _, p := range body.Partitions {
		serving := ""
		if p.Serving {
			serving = " (served here)"
		}
		fmt.Fprintf(out.w, "  partition %d: leader %d%s\n", p.Partition, p.Leader, serving)
	}
	return exitOK
}

func transferLeadership(ctx context.Context, o options, out printer, stderr io.Writer) int {
	payload, _ := json.Marshal(kahuna.TransferRequest{Partition: o.partition, To: o.to})
	if code := adminCall(ctx, o.endpoints, http.MethodPost, kahuna.AdminTransferPath, payload, nil, stderr); code != exitOK {
		return code
	}
	out.print(map[string]any{"partition": o.partition, "to": o.to, "status": "requested"},
		"leadership of partition %d requested for node %d\n", o.partition, o.to)
	return exitOK
}

// adminCall sends one admin request to the first endpoint that answers
// (any node can report partitions and pass on a transfer), decoding a
// successful answer into into.
func adminCall(ctx context.Context, endpoints []string, method, path string, payload []byte, into any, stderr io.Writer) int {
	var failures []string
	cc := connFrom(ctx) // conn.go: the token and CA
	for _, ep := range endpoints {
		c, base := adminClient(cc, ep)
		var body io.Reader
		if payload != nil {
			body = bytes.NewReader(payload)
		}
		req, err := http.NewRequestWithContext(ctx, method, base+path, body)
		if err != nil {
			fmt.Fprintf(stderr, "kahunactl: %v\n", err)
			return exitUsage
		}
		if payload != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		cc.authorize(req)
		resp, err := c.Do(req)
		if err != nil {
			// Not reached: try the next node, unless time is up.
			failures = append(failures, err.Error())
			if ctx.Err() != nil {
				break
			}
			continue
		}
		return answer(resp, req, into, stderr)
	}
	fmt.Fprintf(stderr, "kahunactl: %s: no endpoint reachable: %s\n", path, strings.Join(failures, "; "))
	return exitError
}

// answer reads an admin reply: a 2xx decodes into into, anything else is
// reported with the server's own error message when it sent one.
func answer(resp *http.Response, req *http.Request, into any, stderr io.Writer) int {
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		msg := strings.TrimSpace(string(body))
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		fmt.Fprintf(stderr, "kahunactl: %s %s: %s: %s\n", req.Method, req.URL.Path, resp.Status, strings.ReplaceAll(msg, "\n", "; "))
		return exitError
	}
	if into != nil {
		if err := json.Unmarshal(body, into); err != nil {
			fmt.Fprintf(stderr, "kahunactl: %s: bad answer: %v\n", req.URL.Path, err)
			return exitError
		}
	}
	return exitOK
}
