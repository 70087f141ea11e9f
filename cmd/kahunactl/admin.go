package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kahunago/kahuna/admin"
)

func partitions(ctx context.Context, o options, out printer, stderr io.Writer) int {
	c := connFrom(ctx).admin()
	var v admin.PartitionsView
	if code := adminCall(ctx, o.endpoints, admin.PartitionsPath, stderr, func(ep string) (err error) {
		v, err = c.Partitions(ctx, ep)
		return err
	}, nil); code != exitOK {
		return code
	}
	if out.json {
		_ = json.NewEncoder(out.w).Encode(v)
		return exitOK
	}
	fmt.Fprintf(out.w, "as seen by node %d:\n", v.Node)
	for _, p := range v.Partitions {
		serving := ""
		if p.Serving {
			serving = " (served here)"
		}
		fmt.Fprintf(out.w, "  partition %d: leader %d%s\n", p.Partition, p.Leader, serving)
	}
	return exitOK
}

func transferLeadership(ctx context.Context, o options, out printer, stderr io.Writer) int {
	c := connFrom(ctx).admin()
	req := admin.TransferRequest{Partition: o.partition, To: o.to}
	if code := adminCall(ctx, o.endpoints, admin.TransferPath, stderr, func(ep string) error {
		return c.Transfer(ctx, ep, req)
	}, nil); code != exitOK {
		return code
	}
	out.print(map[string]any{"partition": o.partition, "to": o.to, "status": "requested"},
		"leadership of partition %d requested for node %d\n", o.partition, o.to)
	return exitOK
}

// adminCall makes one admin call, call, on the first endpoint that
// answers (any node can report and pass on a transfer or a membership
// change): one that cannot be reached is skipped, unless time is up. A
// node's refusal is reported by refused (nil: printRefusal). It returns
// the exit code, the reason printed.
func adminCall(ctx context.Context, endpoints []string, path string, stderr io.Writer, call func(endpoint string) error, refused func(*admin.Error) int) int {
	if refused == nil {
		refused = func(e *admin.Error) int { return printRefusal(e, stderr) }
	}
	var failures []string
	var errs []error
	for _, ep := range endpoints {
		err := call(ep)
		var answer *admin.Error
		var bad *url.Error
		switch {
		case err == nil:
			return exitOK
		case errors.As(err, &answer):
			return refused(answer)
		case errors.As(err, &bad) && bad.Op == "parse":
			fmt.Fprintf(stderr, "kahunactl: %v\n", err)
			return exitUsage
		}
		// Not reached: try the next node, unless time is up.
		failures, errs = append(failures, err.Error()), append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	if why := explain(errors.Join(errs...), endpoints, 0); why != "" && !connFrom(ctx).verbose {
		fmt.Fprintf(stderr, "kahunactl: %s: %s\n", path, why)
		return exitError
	}
	fmt.Fprintf(stderr, "kahunactl: %s: no endpoint reachable: %s\n", path, strings.Join(failures, "; "))
	return exitError
}

// printRefusal reports an admin answer that is not a success, with the
// server's own error message when it sent one.
func printRefusal(e *admin.Error, stderr io.Writer) int {
	if e.Err != nil {
		fmt.Fprintf(stderr, "kahunactl: %s: bad answer: %v\n", e.Path, e.Err)
	} else {
		fmt.Fprintf(stderr, "kahunactl: %s %s: %s: %s\n", e.Method, e.Path, e.Status, strings.ReplaceAll(e.Message, "\n", "; "))
	}
	return exitError
}

// memberCommand is kahunactl member, listed with the other commands; it
// has subcommands, so member parses its own arguments.
var memberCommand = command{name: "member", args: "list | add ID --raft-address HOST:PORT --endpoint URL | remove ID [flags]",
	summary: "list, add or remove cluster members: add, then start the new node with --initial-cluster-state existing; a removed ID never comes back; an add or remove that stopped half way is finished by running it again",
	flags:   func(*flag.FlagSet, *options, *string) {}}

// member runs kahunactl member list|add|remove.
func member(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kahunactl member", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var endpoints, raftAddr, endpoint, format string
	var timeout time.Duration
	fs.StringVar(&endpoints, "endpoints", defaultEndpoints(), "comma-separated node URLs (any member will do; host:port = http://host:port; $KAHUNA_ENDPOINTS when not given)")
	durationVar(fs, &timeout, "timeout", 2*time.Minute, "bound on the whole change")
	fs.StringVar(&format, "format", "text", "text or json")
	fs.StringVar(&raftAddr, "raft-address", "", "add: the new member's Raft host:port (its --raft-host:--raft-port)")
	fs.StringVar(&endpoint, "endpoint", "", "add: the new member's API URL, e.g. http://10.0.0.4:2070")
	var co options // the common connection flags (conn.go)
	fs.BoolVar(&co.verbose, "v", false, "errors with the transport's own details")
	fs.StringVar(&co.token, "token", "", "bearer token for nodes started with --auth-token-file (default $KAHUNA_TOKEN)")
	fs.StringVar(&co.caFile, "ca-file", "", "CA certificate (PEM) to verify https:// endpoints with, for a private CA (default: the system's roots)")
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fmt.Fprint(stdout, commandHelp(memberCommand, fs))
				return exitOK
			}
			fmt.Fprintf(stderr, "kahunactl: member: %v\n", err)
			return exitUsage
		}
		if fs.NArg() == 0 {
			break
		}
		pos, args = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "kahunactl: member: "+format+" (kahunactl member -h)\n", a...)
		return exitUsage
	}
	if len(pos) == 0 {
		return usageErr("list, add or remove?")
	}
	if format != "text" && format != "json" {
		return usageErr("--format must be text or json, not %q", format)
	}
	eps, err := parseEndpoints(endpoints)
	if err != nil {
		return usageErr("--endpoints: %v", err)
	}
	if co.token == "" {
		co.token = os.Getenv("KAHUNA_TOKEN")
	}
	cc, err := newConn(co)
	if err != nil {
		fmt.Fprintf(stderr, "kahunactl: member: %v\n", err)
		return exitUsage
	}
	ctx = withConn(ctx, cc)
	out := printer{w: stdout, json: format == "json"}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	sub, rest := pos[0], pos[1:]
	var id uint64
	if sub == "add" || sub == "remove" {
		if len(rest) != 1 {
			return usageErr("%s takes one ID", sub)
		}
		var err error
		if id, err = strconv.ParseUint(rest[0], 10, 64); err != nil || id == 0 {
			return usageErr("ID %q is not a number ≥ 1", rest[0])
		}
	} else if len(rest) > 0 {
		return usageErr("unexpected argument %q", rest[0])
	}
	c := cc.admin()
	switch sub {
	case "list":
		var v admin.MembersView
		if code := adminCall(ctx, eps, admin.MembersPath, stderr, func(ep string) (err error) {
			v, err = c.Members(ctx, ep)
			return err
		}, nil); code != exitOK {
			return code
		}
		if out.json {
			_ = json.NewEncoder(out.w).Encode(membersJSON(v))
			return exitOK
		}
		tw := tabwriter.NewWriter(out.w, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "ID\tRAFT ADDRESS\tENDPOINT\tJOINED\tVOTER IN PARTITIONS\n")
		for _, m := range v.Members {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%v\t%s\n", m.ID, m.RaftAddress, m.Endpoint, m.Joined, ints(m.Partitions))
		}
		tw.Flush()
		if len(v.Removed) > 0 {
			fmt.Fprintf(out.w, "removed (never to come back): %s\n", uints(v.Removed))
		}
		fmt.Fprintf(out.w, "as seen by node %d\n", v.Node)
		return exitOK
	case "add":
		if raftAddr == "" || endpoint == "" {
			return usageErr("add needs --raft-address and --endpoint")
		}
		req := admin.MemberRequest{ID: id, RaftAddress: raftAddr, Endpoint: endpoint}
		return memberChange(ctx, eps, admin.MembersPath, out, stderr, func(ep string) (admin.MemberChangeResult, error) {
			return c.AddMember(ctx, ep, req)
		})
	case "remove":
		return memberChange(ctx, eps, admin.MembersPath+"/"+strconv.FormatUint(id, 10), out, stderr, func(ep string) (admin.MemberChangeResult, error) {
			return c.RemoveMember(ctx, ep, id)
		})
	}
	return usageErr("unknown subcommand %q", sub)
}

// memberChange sends an add or remove (change) and reports what is done
// and left: a node answers the result whatever the status.
func memberChange(ctx context.Context, eps []string, path string, out printer, stderr io.Writer, change func(endpoint string) (admin.MemberChangeResult, error)) int {
	var res admin.MemberChangeResult
	var failed *admin.Error
	if code := adminCall(ctx, eps, path, stderr, func(ep string) (err error) {
		res, err = change(ep)
		return err
	}, func(e *admin.Error) int {
		failed = e
		return exitOK
	}); code != exitOK {
		return code
	}
	if failed != nil && failed.Err != nil {
		res = admin.MemberChangeResult{} // a success that did not decode
	}
	if res.Op == "" {
		if failed != nil {
			fmt.Fprintf(stderr, "kahunactl: %s %s: %s: %s\n", failed.Method, path, failed.Status, failed.Body)
		} else {
			fmt.Fprintf(stderr, "kahunactl: %s: no result in the answer\n", path)
		}
		return exitError
	}
	if out.json {
		_ = json.NewEncoder(out.w).Encode(res)
	}
	if failed == nil {
		if !out.json {
			fmt.Fprintf(out.w, "member %d: %s done on every partition (%s)\n", res.ID, res.Op, ints(res.Done))
		}
		return exitOK
	}
	fmt.Fprintf(stderr, "kahunactl: member %d: %s: %s\n", res.ID, res.Op, res.Error)
	if len(res.Left) > 0 {
		fmt.Fprintf(stderr, "  done on partitions %s; left:\n", ints(res.Done))
		ps := make([]int, 0, len(res.Left))
		for p := range res.Left {
			ps = append(ps, p)
		}
		sort.Ints(ps)
		for _, p := range ps {
			fmt.Fprintf(stderr, "    partition %d: %s\n", p, res.Left[p])
		}
		if !res.Removed {
			fmt.Fprintf(stderr, "  run the same command again to finish\n")
		}
	}
	return exitError
}

// status prints every member's view, asking each member found through
// the first endpoint that answers (and every --endpoints URL).
func status(ctx context.Context, o options, out printer, stderr io.Writer) int {
	c := connFrom(ctx).admin()
	var v admin.MembersView
	if code := adminCall(ctx, o.endpoints, admin.MembersPath, io.Discard, func(ep string) (err error) {
		v, err = c.Members(ctx, ep)
		return err
	}, nil); code != exitOK {
		v = admin.MembersView{} // still ask the endpoints given
	}
	type target struct {
		id       uint64
		endpoint string
	}
	var targets []target
	seen := map[string]bool{}
	for _, m := range v.Members {
		if m.Endpoint != "" && !seen[strings.TrimSuffix(m.Endpoint, "/")] {
			seen[strings.TrimSuffix(m.Endpoint, "/")] = true
			targets = append(targets, target{m.ID, m.Endpoint})
		}
	}
	for _, ep := range o.endpoints {
		if !seen[strings.TrimSuffix(ep, "/")] {
			seen[strings.TrimSuffix(ep, "/")] = true
			targets = append(targets, target{0, ep})
		}
	}
	type row struct {
		Endpoint string            `json:"endpoint"`
		Status   *admin.NodeStatus `json:"status,omitempty"`
		Error    string            `json:"error,omitempty"`
	}
	rows := make([]row, len(targets))
	code := exitOK
	for i, t := range targets {
		rows[i].Endpoint = t.endpoint
		var st admin.NodeStatus
		var msg bytes.Buffer
		if adminCall(ctx, []string{t.endpoint}, admin.StatusPath, &msg, func(ep string) (err error) {
			st, err = c.Status(ctx, ep)
			return err
		}, nil) != exitOK {
			rows[i].Error = strings.TrimSpace(strings.TrimPrefix(msg.String(), "kahunactl: "))
			code = exitError
			continue
		}
		rows[i].Status = &st
		if !st.Healthy || st.NoSpace != "" {
			code = exitError
		}
	}
	if out.json {
		_ = json.NewEncoder(out.w).Encode(rows)
		return code
	}
	health := func(st *admin.NodeStatus) string {
		switch {
		case st.Starting != "":
			return "starting"
		case !st.Healthy:
			return "unhealthy"
		case st.NoSpace != "":
			return "no-space"
		}
		return "healthy"
	}
	tw := tabwriter.NewWriter(out.w, 0, 4, 2, ' ', 0)
	if !o.partitionsView {
		// One row per member, as etcdctl endpoint status: how many
		// partitions it runs and leads, its highest term, the sum of
		// its applied indexes; the error last, for one that did not answer.
		fmt.Fprintf(tw, "ENDPOINT\tNODE\tHEALTH\tRUNNING\tLEADS\tTERM\tAPPLIED\tERROR\n")
		for _, r := range rows {
			if r.Status == nil {
				fmt.Fprintf(tw, "%s\t-\tunreachable\t-\t-\t-\t-\t%s\n", r.Endpoint, r.Error)
				continue
			}
			var running, leads int
			var term, applied uint64
			for _, p := range r.Status.Partitions {
				if p.Running {
					running++
				}
				if p.Serving {
					leads++
				}
				term, applied = max(term, p.Term), applied+p.Applied
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d/%d\t%d\t%d\t%d\t\n", r.Endpoint, r.Status.Node, health(r.Status), running, len(r.Status.Partitions), leads, term, applied)
		}
	} else {
		fmt.Fprintf(tw, "ENDPOINT\tNODE\tHEALTH\tPARTITION\tLEADER\tTERM\tAPPLIED\tSERVING\tVOTERS\n")
	}
	for _, r := range rows {
		if !o.partitionsView {
			break
		}
		if r.Status == nil {
			fmt.Fprintf(tw, "%s\t-\tunreachable\t-\t-\t-\t-\t-\t%s\n", r.Endpoint, r.Error)
			continue
		}
		health := health(r.Status)
		for _, p := range r.Status.Partitions {
			serving := ""
			if p.Serving {
				serving = "yes"
			}
			leader := strconv.FormatUint(p.Leader, 10)
			if !p.Running {
				leader = "(not running)"
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%d\t%d\t%s\t%s\n", r.Endpoint, r.Status.Node, health, p.Partition, leader, p.Term, p.Applied, serving, uints(p.Voters))
		}
	}
	tw.Flush()
	for _, r := range rows {
		if r.Status != nil && r.Status.Starting != "" {
			fmt.Fprintf(out.w, "node %d is starting, waiting for the cluster: %s\n", r.Status.Node, r.Status.Starting)
		}
		if r.Status != nil && r.Status.NoSpace != "" {
			fmt.Fprintf(out.w, "node %d refuses new persistent locks: %s\n", r.Status.Node, r.Status.NoSpace)
		}
	}
	return code
}

func ints(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

func uints(xs []uint64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.FormatUint(x, 10)
	}
	return strings.Join(s, ",")
}

// memberJSON and membersJSON are member list's JSON output: camelCase, as
// every other command's JSON is. The admin API between members keeps its
// own spelling (raft_address), which members of another version read.
type memberJSON struct {
	ID          uint64 `json:"id"`
	RaftAddress string `json:"raftAddress"`
	Endpoint    string `json:"endpoint"`
	Joined      bool   `json:"joined"`
	Partitions  []int  `json:"partitions"`
}

type membersView struct {
	Node         uint64       `json:"node"`
	DeploymentID uint64       `json:"deploymentId"`
	TokenHash    string       `json:"tokenHash"`
	Members      []memberJSON `json:"members"`
	Removed      []uint64     `json:"removed,omitempty"`
}

func membersJSON(v admin.MembersView) membersView {
	out := membersView{Node: v.Node, DeploymentID: v.DeploymentID, TokenHash: v.TokenHash, Removed: v.Removed, Members: []memberJSON{}}
	for _, m := range v.Members {
		out.Members = append(out.Members, memberJSON(m))
	}
	return out
}
