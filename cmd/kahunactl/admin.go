package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/kahunago/kahuna"
)

// adminClient talks to a node's admin API over HTTP/1.1 (REST port).
func adminClient(endpoint string) (*http.Client, string) {
	c := &http.Client{}
	if strings.HasPrefix(endpoint, "https://") {
		c.Transport = &http.Transport{TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12}}
	}
	return c, strings.TrimSuffix(endpoint, "/")
}

func partitions(ctx context.Context, o options, out printer, stderr io.Writer) int {
	c, base := adminClient(o.endpoints[0])
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+kahuna.AdminPartitionsPath, nil)
	if err != nil {
		fmt.Fprintf(stderr, "kahunactl: %v\n", err)
		return exitUsage
	}
	var body struct {
		Node       uint64                 `json:"node"`
		Partitions []kahuna.PartitionInfo `json:"partitions"`
	}
	if code := do(c, req, &body, stderr); code != exitOK {
		return code
	}
	if out.json {
		_ = json.NewEncoder(out.w).Encode(body)
		return exitOK
	}
	fmt.Fprintf(out.w, "as seen by node %d:\n", body.Node)
	for _, p := range body.Partitions {
		fmt.Fprintf(out.w, "  partition %d: leader %d\n", p.Partition, p.Leader)
	}
	return exitOK
}

func transferLeadership(ctx context.Context, o options, out printer, stderr io.Writer) int {
	if o.partition < 0 || o.to == 0 {
		fmt.Fprintln(stderr, "kahunactl: transfer-leadership needs --partition P and --to NODE")
		return exitUsage
	}
	c, base := adminClient(o.endpoints[0])
	payload, _ := json.Marshal(kahuna.TransferRequest{Partition: o.partition, To: o.to})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+kahuna.AdminTransferPath, bytes.NewReader(payload))
	if err != nil {
		fmt.Fprintf(stderr, "kahunactl: %v\n", err)
		return exitUsage
	}
	req.Header.Set("Content-Type", "application/json")
	if code := do(c, req, nil, stderr); code != exitOK {
		return code
	}
	out.print(map[string]any{"partition": o.partition, "to": o.to, "status": "requested"},
		"leadership of partition %d requested for node %d\n", o.partition, o.to)
	return exitOK
}

func do(c *http.Client, req *http.Request, into any, stderr io.Writer) int {
	resp, err := c.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "kahunactl: %v\n", err)
		return exitError
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		fmt.Fprintf(stderr, "kahunactl: %s: %s %s\n", req.URL.Path, resp.Status, strings.TrimSpace(string(body)))
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
