// Command kahunactl locks, extends, unlocks and inspects locks on kahuna
// nodes, runs a command under a lock, and moves partition leadership.
//
//	kahunactl lock jobs/export --ttl 30s            # prints owner and fencing token
//	kahunactl lock jobs/export -- ./export.sh --all # runs the script while holding the lock
//	kahunactl extend jobs/export --owner OWNER --ttl 30s
//	kahunactl unlock jobs/export --owner OWNER
//	kahunactl get jobs/export
//	kahunactl locks jobs/ --limit 50                 # live locks whose name starts with jobs/ (locks.go)
//	kahunactl elect scheduler node-a                 # campaigns, prints the epoch when elected, leads until interrupted
//	kahunactl elect scheduler node-a -- ./schedule   # runs the command while leader
//	kahunactl elect --listen scheduler               # prints every change of leader
//	kahunactl partitions                             # who leads each partition
//	kahunactl transfer-leadership --partition 3 --to 2
//	kahunactl member list|add|remove                 # cluster membership (admin.go)
//	kahunactl status                                 # every member's health, one row each (--partitions: per partition)
//	kahunactl --version
//
// kahunactl COMMAND -h describes a command and lists its flags.
//
// # Running a command under a lock
//
// kahunactl lock RESOURCE [flags] -- CMD [ARGS...] waits for the lock
// (for --wait if given, else until interrupted), then runs CMD with the
// parent's environment plus KAHUNA_LOCK_RESOURCE, KAHUNA_LOCK_OWNER and
// KAHUNA_FENCING_TOKEN, extends the lease in the background (every third
// of --ttl) while CMD runs, releases the lock when CMD exits and exits with
// CMD's status (128+N if CMD was killed by signal N, as a shell reports
// it; 127 if CMD is not found, 126 if it cannot be run, said before any
// lock is taken). kahunactl itself prints nothing on stdout: that is CMD's.
//
// If the lock is lost while CMD runs (the lease could not be extended
// before it ran out, say the nodes are unreachable, or a node reports it
// held by another owner), kahunactl sends CMD SIGTERM, then SIGKILL after
// --grace (default 10s), and exits 4. SIGINT and SIGTERM sent to kahunactl
// are passed on to CMD (which is in kahunactl's process group, so a Ctrl-C
// in a terminal also reaches it directly); kahunactl then waits for CMD to
// exit and releases the lock as usual. Interrupted while still waiting for
// the lock, kahunactl runs nothing and exits 128+N. Signals go to CMD's
// process only: use `sh -c 'exec ...'` or a CMD that passes them on to
// its own children.
//
// kahunactl lock A B ... -- CMD holds several names at once, in one
// session (one lease renewed for all, every third of --ttl): it takes them
// in sorted order, each waited for as above, so commands that lock
// overlapping sets wait for each other instead of deadlocking. CMD gets
// KAHUNA_LOCK_RESOURCES (the names, one per line), KAHUNA_SESSION_ID (also
// KAHUNA_LOCK_OWNER: every name is held by the session's ID) and
// KAHUNA_FENCING_TOKENS (a JSON object, name to token). CMD is stopped as
// above if the session is lost; closing it releases every name.
//
// kahunactl lock --read NAME [-- CMD] takes a read lock of the read/write
// lock NAME (the entry rwlock:NAME), shared with other readers, and
// --write its write lock; the fencing token is the write epoch, and CMD
// gets KAHUNA_LOCK_MODE (read or write) too.
//
// # Leader election
//
// kahunactl elect NAME VALUE campaigns in election NAME (the lock
// election:NAME), waiting in line until elected or interrupted, prints
// the epoch when elected, and leads, renewing every third of --ttl, until
// SIGINT or SIGTERM, which resigns (exit 0); a lost leadership exits 4.
// With -- CMD [ARGS...] it runs CMD while leader, as lock -- CMD does,
// with KAHUNA_ELECTION_NAME, KAHUNA_ELECTION_VALUE, KAHUNA_ELECTION_EPOCH
// and KAHUNA_FENCING_TOKEN (the epoch) in its environment, sends it
// SIGTERM (then SIGKILL after --grace) when leadership is lost and exits
// with CMD's status, or 4 when lost; it resigns when CMD exits. kahunactl
// elect --listen NAME prints the current leader, then every change
// (elected with value and epoch, vacant), until interrupted.
//
// # Timeouts
//
// --timeout (default 30s) bounds the calls to the nodes: a lock, extend,
// unlock or get, dialling, and the release after CMD. lock's --wait comes
// on top of it: lock --wait 2m --timeout 30s gives up after at most 2m30s,
// with exit 3 if the lock was busy for the whole 2m. The time CMD runs is
// not bounded.
//
// # Exit codes
//
// 0 success, 1 error, 2 usage (bad input kahunactl can see itself
// included: a --ttl or --wait over the limit, an over-long RESOURCE or
// --owner, said with the reason), 3 busy, 4 lock lost (not the owner, or
// no such lock; with -- CMD: the lock was lost while CMD ran); lock -- CMD
// exits with CMD's status, and 128+N when interrupted by signal N while
// waiting.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/internal/buildinfo"
	"github.com/kahunago/kahuna/lease"
	"github.com/kahunago/kahuna/transport"
)

const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
	exitBusy  = 3
	exitLost  = 4
	// lock -- CMD, as a shell: CMD found but not executable, not found.
	exitCannotRun = 126
	exitNotFound  = 127
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

type options struct {
	endpoints  []string
	ttl        time.Duration
	wait       time.Duration
	waitGiven  bool // --wait was on the command line
	grace      time.Duration
	durability kahuna.Durability
	owner      string
	format     string
	timeout    time.Duration
	partition  int
	to         uint64
	token      string // --token, else $KAHUNA_TOKEN
	caFile     string // --ca-file: trust this CA for https:// endpoints
	verbose    bool   // -v: errors with the transport's own words too
	// status --partitions: a row per member and partition.
	partitionsView bool
	value          string   // elect's VALUE
	more           []string // lock A B ... -- CMD: the RESOURCEs after the first
	listen         bool     // elect --listen
	limit          int      // locks --limit
	after          string   // locks --after
	semLimit       int      // semaphore --limit
	permits        int      // semaphore -n
	setLimit       int      // semaphore --set-limit
	setLimitGiven  bool     // --set-limit was on the command line
	// lock --read, --write: the read or the write lock of the read/write
	// lock RESOURCE (its entry is rwlock:RESOURCE).
	read, write bool
}

// A command is one of kahunactl's commands.
type command struct {
	name     string
	args     string // what follows the name in its synopsis
	summary  string // one line, for -h and the command list
	resource bool   // takes a RESOURCE
	// prefix: the RESOURCE is a name prefix, which may be empty or left out.
	prefix bool
	// flags registers the command's own flags (the common ones are added
	// for every command).
	flags func(fs *flag.FlagSet, o *options, durability *string)
}

var commands = []command{
	{name: "lock", args: "RESOURCE [flags] [-- CMD [ARGS...]] | RESOURCE RESOURCE... [flags] -- CMD [ARGS...]", resource: true,
		summary: "acquire RESOURCE and print its owner and fencing token; with -- CMD, hold it while CMD runs",
		flags: func(fs *flag.FlagSet, o *options, d *string) {
			durabilityFlag(fs, d)
			ttlFlag(fs, o, "lease length (with -- CMD: extended every third of it while CMD runs)")
			durationVar(fs, &o.wait, "wait", 0, "keep trying this long while the lock is busy (default: try once; with -- CMD: wait until interrupted)")
			fs.StringVar(&o.owner, "owner", "", "owner to lock as (default a fresh random one)")
			durationVar(fs, &o.grace, "grace", 10*time.Second, "with -- CMD: once the lock is lost, how long CMD gets after SIGTERM before SIGKILL")
			fs.BoolVar(&o.read, "read", false, "take a read lock of the read/write lock RESOURCE: shared with other readers, its fencing token the write epoch it reads under")
			fs.BoolVar(&o.write, "write", false, "take the write lock of the read/write lock RESOURCE: exclusive, its fencing token a new write epoch")
		}},
	{name: "extend", args: "RESOURCE --owner OWNER [flags]", resource: true,
		summary: "extend the lease of RESOURCE held by OWNER",
		flags: func(fs *flag.FlagSet, o *options, d *string) {
			namedDurabilityFlag(fs, d)
			ttlFlag(fs, o, "new lease length, from now")
			fs.StringVar(&o.owner, "owner", "", "the owner lock printed (required)")
		}},
	{name: "unlock", args: "RESOURCE --owner OWNER [flags]", resource: true,
		summary: "release RESOURCE held by OWNER",
		flags: func(fs *flag.FlagSet, o *options, d *string) {
			namedDurabilityFlag(fs, d)
			fs.StringVar(&o.owner, "owner", "", "the owner lock printed (required)")
		}},
	{name: "get", args: "RESOURCE [flags]", resource: true,
		summary: "show the live lock on RESOURCE: owner, fencing token, expiry",
		flags: func(fs *flag.FlagSet, o *options, d *string) {
			namedDurabilityFlag(fs, d)
		}},
	{name: "partitions", args: "[flags]",
		summary: "show which node leads each partition",
		flags:   func(*flag.FlagSet, *options, *string) {}},
	{name: "transfer-leadership", args: "--partition P --to NODE [flags]",
		summary: "move the leadership of partition P to node NODE",
		flags: func(fs *flag.FlagSet, o *options, _ *string) {
			fs.IntVar(&o.partition, "partition", -1, "the partition (required)")
			fs.Uint64Var(&o.to, "to", 0, "ID of the node to lead it (required)")
		}},
	locksCommand,     // locks.go
	memberCommand,    // admin.go
	watchCommand,     // watch.go
	electCommand,     // elect.go
	semaphoreCommand, // semaphore.go
	{name: "status", args: "[flags]",
		summary: "show every member's health, one row each: partitions it runs and leads, highest term, applied index",
		flags: func(fs *flag.FlagSet, o *options, _ *string) {
			fs.BoolVar(&o.partitionsView, "partitions", false, "one row per member and partition: its leader, term, applied index, voters")
		}},
}

func findCommand(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

func durabilityFlag(fs *flag.FlagSet, d *string) {
	fs.StringVar(d, "durability", "persistent", "persistent or ephemeral")
}

// namedDurabilityFlag is --durability of a call on a lock already taken:
// a kahuna node has one lock per name and ignores it; a Kahuna server
// keeps ephemeral and persistent locks apart and acts on the one named.
func namedDurabilityFlag(fs *flag.FlagSet, d *string) {
	fs.StringVar(d, "durability", "persistent", "which lock of RESOURCE a Kahuna server acts on, persistent or ephemeral (a kahuna node has one lock per name and acts on it whatever this says)")
}

func ttlFlag(fs *flag.FlagSet, o *options, usage string) {
	durationVar(fs, &o.ttl, "ttl", 30*time.Second, usage)
}

// durationValue is a duration flag whose parse error says what a
// duration looks like (the flag package's says "parse error").
type durationValue struct{ d *time.Duration }

func durationVar(fs *flag.FlagSet, d *time.Duration, name string, value time.Duration, usage string) {
	*d = value
	fs.Var(durationValue{d}, name, usage)
}

func (v durationValue) String() string {
	if v.d == nil {
		return "0s"
	}
	return v.d.String()
}

func (v durationValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("not a duration (a number and a unit: 500ms, 30s, 5m, 1h)")
	}
	*v.d = d
	return nil
}

// Get makes PrintDefaults show the flag as a duration.
func (v durationValue) Get() any { return *v.d }

func usage() string {
	var b strings.Builder
	b.WriteString("usage: kahunactl COMMAND [RESOURCE] [flags]\n\ncommands:\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "  %-20s %s\n", c.name, c.summary)
	}
	b.WriteString(`
kahunactl COMMAND -h describes a command and lists its flags; kahunactl --version
prints the version. Common flags (before or after the command):
  --endpoints URLS    comma-separated node URLs or host:port (default $KAHUNA_ENDPOINTS,
                      else http://127.0.0.1:2070)
  --timeout D         bound on the calls to the nodes (default 30s; lock adds --wait)
  --format F          text (default) or json
  --token T           bearer token (default $KAHUNA_TOKEN)
  --ca-file F         CA (PEM) for https:// endpoints signed by a private CA
  -v                  errors with the transport's own details too

exit codes: 0 success, 1 error, 2 usage, 3 busy, 4 lock lost (not the owner,
or no such lock; lock -- CMD: lost while CMD ran); lock -- CMD exits with
CMD's status, 127 if CMD is not found (nothing locked), 128+N when
interrupted by signal N while waiting
`)
	return b.String()
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage())
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage())
		return exitOK
	case "-version", "--version", "version":
		fmt.Fprintln(stdout, buildinfo.Version("kahunactl"))
		return exitOK
	}
	args, code := hoistCommonFlags(args, stderr)
	if code >= 0 {
		return code
	}
	name, args := args[0], args[1:]
	if name == memberCommand.name {
		return member(ctx, args, stdout, stderr) // admin.go: has subcommands
	}
	cmd, known := findCommand(name)
	if !known {
		fmt.Fprintf(stderr, "kahunactl: unknown command %q (kahunactl -h lists them)\n", name)
		return exitUsage
	}
	o, resource, argv, code := parseArgs(cmd, args, stdout, stderr)
	if code >= 0 {
		return code
	}

	cc, err := newConn(o)
	if err != nil {
		fmt.Fprintf(stderr, "kahunactl: %s\n", oneLine(err))
		return exitUsage
	}
	ctx = withConn(ctx, cc)
	dctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	out := printer{w: stdout, json: o.format == "json", endpoints: o.endpoints, timeout: o.timeout, verbose: o.verbose}
	switch cmd.name {
	case "partitions":
		return partitions(dctx, o, out, stderr)
	case "transfer-leadership":
		return transferLeadership(dctx, o, out, stderr)
	case "status":
		return status(dctx, o, out, stderr)
	case "locks":
		return locks(dctx, resource, o, cc, out, stderr) // locks.go
	case "get":
		if lease.IsSemaphore(resource) || lease.IsRWLock(resource) {
			return getShared(dctx, resource, o, cc, out, stderr) // locks.go
		}
	}
	copts := cc.clientOptions()
	if cmd.name == "lock" || cmd.name == "elect" || cmd.name == "semaphore" {
		// The handle retries MustRetry itself, and so knows when the nodes
		// answer but cannot serve (starting, electing), to say so.
		copts = append(copts, transport.WithMustRetryBudget(0))
	}
	client, err := transport.Dial(dctx, o.endpoints, copts...)
	if err != nil {
		fmt.Fprintf(stderr, "kahunactl: %s\n", out.errorLine(err))
		return exitError
	}
	defer client.Close()
	switch cmd.name {
	case "lock":
		if argv != nil && len(o.more) > 0 {
			return lockAllAndRun(ctx, client, append([]string{resource}, o.more...), argv, o, stdout, stderr)
		}
		if argv != nil {
			return lockAndRun(ctx, client, resource, argv, o, stdout, stderr)
		}
		// The overall timeout covers the wait: --timeout for the calls,
		// on top of --wait for a busy lock.
		lctx, cancel := context.WithTimeout(ctx, o.timeout+o.wait)
		defer cancel()
		return lock(lctx, client, resource, o, out, stderr)
	case "extend":
		r, err := client.Extend(dctx, resource, []byte(o.owner), o.ttl, o.durability)
		return report(out, stderr, "extend", resource, o.owner, r, err, kahuna.Extended)
	case "unlock":
		r, err := client.Unlock(dctx, resource, []byte(o.owner), o.durability)
		return report(out, stderr, "unlock", resource, o.owner, r, err, kahuna.Unlocked)
	case "watch":
		return watch(ctx, client, resource, out, stderr) // watch.go
	case "elect":
		return elect(ctx, client, resource, o, argv, out, stdout, stderr) // elect.go
	case "semaphore":
		return semaphore(ctx, client, resource, o, argv, out, stdout, stderr) // semaphore.go
	default:
		info, r, err := client.Get(dctx, resource, o.durability)
		if err == nil && r.Status == kahuna.Got {
			out.print(map[string]any{"resource": resource, "status": r.Status.String(), "owner": string(info.Owner),
				"fencingToken": info.FencingToken, "expires": info.Expires.UTC().Format(time.RFC3339Nano)},
				"%s owned by %s, fencing token %d, expires %s\n", resource, info.Owner, info.FencingToken, info.Expires.UTC().Format(time.RFC3339Nano))
			return exitOK
		}
		return report(out, stderr, "get", resource, "", r, err, kahuna.Got)
	}
}

// commonFlags are the flags every command takes, each with a value: they
// may also come before the command (kahunactl --endpoints URL lock …), as
// etcdctl, consul and kubectl accept them.
var commonFlags = map[string]bool{"endpoints": true, "timeout": true, "format": true, "token": true, "ca-file": true}

// hoistCommonFlags moves common flags given before the command to just
// after it, where the command's parser reads them. code is the exit code
// of a usage error already printed, else -1.
func hoistCommonFlags(args []string, stderr io.Writer) (_ []string, code int) {
	var lead []string
	for len(args) > 0 && strings.HasPrefix(args[0], "-") && args[0] != "--" {
		name, _, hasValue := strings.Cut(strings.TrimLeft(args[0], "-"), "=")
		if name == "v" {
			lead, args = append(lead, args[0]), args[1:]
			continue
		}
		if !commonFlags[name] {
			fmt.Fprintf(stderr, "kahunactl: %s before the command: only the common flags (--endpoints, --timeout, --format, --token, --ca-file, -v) may come there (kahunactl -h)\n", args[0])
			return nil, exitUsage
		}
		n := 1
		if !hasValue {
			n = 2
		}
		if len(args) < n {
			fmt.Fprintf(stderr, "kahunactl: %s needs a value\n", args[0])
			return nil, exitUsage
		}
		lead, args = append(lead, args[:n]...), args[n:]
	}
	if len(args) == 0 {
		fmt.Fprintf(stderr, "kahunactl: no command after %s (kahunactl -h lists them)\n", strings.Join(lead, " "))
		return nil, exitUsage
	}
	return slices.Concat(args[:1], lead, args[1:]), -1
}

// defaultEndpoints is --endpoints' default: $KAHUNA_ENDPOINTS, else a node
// on this machine.
func defaultEndpoints() string {
	if e := os.Getenv("KAHUNA_ENDPOINTS"); e != "" {
		return e
	}
	return "http://127.0.0.1:2070"
}

// parseEndpoints splits --endpoints. A URL without a scheme is taken as
// http:// (127.0.0.1:2070 means http://127.0.0.1:2070).
func parseEndpoints(s string) ([]string, error) {
	var eps []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e == "" {
			continue
		}
		if !strings.Contains(e, "://") {
			e = "http://" + e
		}
		if u, err := url.Parse(e); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("%q is not a host:port or an http:// or https:// URL", e)
		}
		eps = append(eps, e)
	}
	if len(eps) == 0 {
		return nil, errors.New("no endpoint given")
	}
	return eps, nil
}

// parseArgs parses a command's arguments: its flags, its RESOURCE and,
// for lock, a CMD after "--". code is the exit code when kahunactl is to
// stop here (help, or a usage error already printed), else -1.
func parseArgs(cmd command, args []string, stdout, stderr io.Writer) (o options, resource string, argv []string, code int) {
	fs := flag.NewFlagSet("kahunactl "+cmd.name, flag.ContinueOnError)
	// The flag package prints the whole flag list on any error; say one
	// line instead (below), and print the help on stdout for -h.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	var endpoints, durability string
	fs.StringVar(&endpoints, "endpoints", defaultEndpoints(), "comma-separated node URLs (http:// = h2c, https:// = TLS, host:port = http://host:port; $KAHUNA_ENDPOINTS when not given)")
	timeoutUsage := "bound on the calls to the nodes"
	if cmd.name == "lock" {
		timeoutUsage += " (--wait comes on top of it)"
	}
	durationVar(fs, &o.timeout, "timeout", 30*time.Second, timeoutUsage)
	fs.StringVar(&o.format, "format", "text", "text or json")
	fs.StringVar(&o.token, "token", "", "bearer token for nodes started with --auth-token-file (default $KAHUNA_TOKEN)")
	fs.StringVar(&o.caFile, "ca-file", "", "CA certificate (PEM) to verify https:// endpoints with, for a private CA (default: the system's roots)")
	fs.BoolVar(&o.verbose, "v", false, "errors with the transport's own details")
	cmd.flags(fs, &o, &durability)

	usageErr := func(format string, a ...any) (options, string, []string, int) {
		fmt.Fprintf(stderr, "kahunactl: "+format+"\n", a...)
		return o, "", nil, exitUsage
	}
	// The RESOURCE may come before, after or between the flags: the flag
	// package stops at the first non-flag argument, so take it and go on.
	// A "--" before the RESOURCE lets it start with '-'; after it, for
	// lock, the rest is the CMD to run.
	var (
		haveResource, haveValue bool
		extra                   []string
	)
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fmt.Fprint(stdout, commandHelp(cmd, fs))
				return o, "", nil, exitOK
			}
			return usageErr("%s", flagError(cmd.name, err))
		}
		rest := fs.Args()
		terminated := len(rest) < len(args) && args[len(args)-len(rest)-1] == "--"
		if terminated && haveResource && (cmd.name == "lock" || cmd.name == "semaphore" || cmd.name == "elect" && haveValue) {
			if len(rest) == 0 {
				return usageErr("%s %s --: no CMD to run after --", cmd.name, resource)
			}
			argv = rest
			break
		}
		if len(rest) == 0 {
			break
		}
		switch {
		case cmd.resource && !haveResource:
			resource, haveResource = rest[0], true
		case cmd.name == "elect" && !haveValue && !o.listen:
			o.value, haveValue = rest[0], true
		default:
			extra = append(extra, rest[0])
		}
		args = rest[1:]
	}
	ownerGiven := false
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "wait":
			o.waitGiven = true
		case "owner":
			ownerGiven = true
		case "set-limit":
			o.setLimitGiven = true
		}
	})
	if cmd.name == "lock" && argv != nil && len(extra) > 0 {
		o.more, extra = extra, nil // lock A B ... -- CMD: several names, one session
	}
	if len(extra) > 0 {
		switch {
		case !cmd.resource:
			return usageErr("%s takes no RESOURCE (got %q)", cmd.name, extra[0])
		case cmd.name == "lock":
			return usageErr("unexpected argument %q (to run a command under the lock: kahunactl lock RESOURCE [RESOURCE...] -- CMD [ARGS...])", extra[0])
		case cmd.name == "elect" && o.listen:
			return usageErr("unexpected argument %q (elect --listen NAME takes no VALUE)", extra[0])
		case cmd.name == "elect":
			return usageErr("unexpected argument %q (to run a command while leader: kahunactl elect NAME VALUE -- CMD [ARGS...])", extra[0])
		}
		return usageErr("unexpected argument %q", extra[0])
	}
	if cmd.resource && !cmd.prefix {
		switch durability {
		case "persistent":
			o.durability = kahuna.Persistent
		case "ephemeral":
			o.durability = kahuna.Ephemeral
		default:
			return usageErr("--durability must be persistent or ephemeral, not %q", durability)
		}
	}
	if cmd.prefix && o.format == "table" {
		o.format = "text" // the text of a listing is a table
	}
	if o.format != "text" && o.format != "json" {
		return usageErr("--format must be text or json, not %q", o.format)
	}
	if o.token == "" {
		o.token = os.Getenv("KAHUNA_TOKEN")
	}
	eps, err := parseEndpoints(endpoints)
	if err != nil {
		return usageErr("--endpoints: %v", err)
	}
	o.endpoints = eps
	switch {
	case cmd.name == "elect" && strings.TrimSpace(resource) == "":
		return usageErr("elect needs a NAME (and a VALUE, or --listen NAME)")
	case cmd.resource && !cmd.prefix && resource == "":
		return usageErr("%s needs a RESOURCE", cmd.name)
	case cmd.resource && !cmd.prefix && strings.TrimSpace(resource) == "":
		return usageErr("%s: RESOURCE %q is only white space", cmd.name, resource)
	case ownerGiven && o.owner == "":
		return usageErr("--owner is empty (leave it out for a fresh random owner)")
	case (cmd.name == "extend" || cmd.name == "unlock") && o.owner == "":
		return usageErr("%s needs --owner (the one lock printed)", cmd.name)
	case cmd.name == "elect" && !o.listen && !haveValue:
		return usageErr("elect needs a NAME and a VALUE (or --listen NAME)")
	case cmd.name == "elect" && o.listen && haveValue:
		return usageErr("elect --listen NAME takes no VALUE (got %q)", o.value)
	case cmd.name == "elect" && o.listen && argv != nil:
		return usageErr("elect --listen runs no CMD")
	case (cmd.name == "lock" || cmd.name == "extend" || cmd.name == "elect") && o.ttl <= 0:
		return usageErr("--ttl must be positive, not %v", o.ttl)
	case o.wait < 0:
		return usageErr("--wait must not be negative, not %v", o.wait)
	case o.grace < 0:
		return usageErr("--grace must not be negative, not %v", o.grace)
	case o.timeout <= 0:
		return usageErr("--timeout must be positive, not %v", o.timeout)
	case o.read && o.write:
		return usageErr("lock: --read or --write, not both")
	case cmd.name == "transfer-leadership" && (o.partition < 0 || o.to == 0):
		return usageErr("transfer-leadership needs --partition P and --to NODE")
	}
	if reason := invalidInput(cmd.name, resource, o); reason != "" {
		return usageErr("%s %s: invalid input: %s", cmd.name, lease.Excerpt(resource), reason)
	}
	if len(o.more) > 0 {
		if o.read || o.write {
			return usageErr("lock: --read and --write take one RESOURCE, a read/write lock")
		}
		if ownerGiven {
			return usageErr("lock: --owner does not go with several RESOURCEs (one session holds them all, under its own ID)")
		}
		seen := map[string]bool{resource: true}
		for _, r := range o.more {
			if reason := invalidInput(cmd.name, r, o); reason != "" {
				return usageErr("%s %s: invalid input: %s", cmd.name, lease.Excerpt(r), reason)
			}
			if strings.TrimSpace(r) == "" {
				return usageErr("lock: RESOURCE %q is only white space", r)
			}
			if seen[r] {
				return usageErr("lock: RESOURCE %s is named twice", lease.Excerpt(r))
			}
			seen[r] = true
		}
	}
	return o, resource, argv, -1
}

// invalidInput says why a lock command's request would be InvalidInput
// (lease.Request.Check, the node's own rule), or "": kahunactl refuses it
// as a usage error before any call.
func invalidInput(cmd, resource string, o options) string {
	if cmd == "elect" {
		return invalidElection(resource, o)
	}
	var which lease.Op
	switch cmd {
	case "lock":
		which = lease.TryLock
	case "extend":
		which = lease.Extend
	case "unlock":
		which = lease.Unlock
	case "get":
		which = lease.Get
	case "locks":
		return lease.ListRequest{Prefix: resource, After: o.after, Limit: o.limit}.Check()
	default:
		return ""
	}
	owner := []byte(o.owner)
	if cmd == "lock" && o.owner == "" {
		owner = kahuna.NewOwner() // what Acquire will send
	}
	req := lease.Request{Op: which, Resource: resource, Owner: owner, TTL: o.ttl, Durability: o.durability}
	if cmd == "lock" {
		req.Resource, req.Wait, req.Shared = lockedName(resource, o), o.wait, o.read
	}
	if _, reason := req.Check(); reason != "" {
		return reason
	}
	if !utf8.ValidString(resource) {
		return "resource is not valid UTF-8" // the wire carries it as a string
	}
	return ""
}

// commandHelp is a command's -h: its synopsis, what it does and its flags.
func commandHelp(cmd command, fs *flag.FlagSet) string {
	var b strings.Builder
	fmt.Fprintf(&b, "usage: kahunactl %s %s\n\n%s.\n\nflags:\n", cmd.name, cmd.args, upperFirst(cmd.summary))
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	sort.Strings(names)
	for _, n := range names {
		f := fs.Lookup(n)
		kind, u := flag.UnquoteUsage(f)
		if _, ok := f.Value.(durationValue); ok {
			kind = "duration"
		}
		line := "  --" + n
		if kind != "" {
			line += " " + kind
		}
		if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "0s" && !strings.HasSuffix(u, "(required)") {
			u += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintf(&b, "%-24s %s\n", line, u)
	}
	return b.String()
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

var (
	invalidValue = regexp.MustCompile(`^invalid (?:value|boolean value) (".*") for flag -([^:]+): (.*)$`)
	undefined    = regexp.MustCompile(`^flag provided but not defined: -+(.*)$`)
	needsValue   = regexp.MustCompile(`^flag needs an argument: -+(.*)$`)
)

// flagError says in one line which flag was wrong and why.
func flagError(cmd string, err error) string {
	s := err.Error()
	if m := invalidValue.FindStringSubmatch(s); m != nil {
		why := m[3]
		if why == "parse error" || why == "value out of range" {
			why = "not a valid number"
		}
		return fmt.Sprintf("--%s %s: %s", m[2], m[1], why)
	}
	if m := undefined.FindStringSubmatch(s); m != nil {
		return fmt.Sprintf("%s has no flag --%s (kahunactl %s -h lists its flags)", cmd, m[1], cmd)
	}
	if m := needsValue.FindStringSubmatch(s); m != nil {
		return fmt.Sprintf("--%s needs a value", m[1])
	}
	return s
}

// oneLine folds a (possibly joined, multi-line) error into one line,
// dropping a line already said: a client with several streams per
// endpoint reports the same dial failure once per stream.
func oneLine(err error) string {
	var parts []string
next:
	for _, l := range strings.Split(err.Error(), "\n") {
		if l = strings.TrimSpace(l); l == "" {
			continue
		}
		for _, p := range parts {
			if strings.Contains(p, l) {
				continue next
			}
		}
		parts = append(parts, l)
	}
	return strings.Join(parts, "; ")
}

func acquireOptions(o options) []kahuna.AcquireOption {
	opts := []kahuna.AcquireOption{kahuna.WithTTL(o.ttl), kahuna.WithDurability(o.durability)}
	if o.owner != "" {
		opts = append(opts, kahuna.WithOwner([]byte(o.owner)))
	}
	return opts
}

// lockedName is the entry lock takes for RESOURCE: the read/write lock's
// with --read or --write, else RESOURCE itself.
func lockedName(resource string, o options) string {
	if o.read || o.write {
		return kahuna.RWLockPrefix + resource
	}
	return resource
}

// lockMode is "read" or "write" with --read or --write, else "".
func lockMode(o options) string {
	switch {
	case o.read:
		return "read"
	case o.write:
		return "write"
	}
	return ""
}

// take is how lock takes RESOURCE: a plain lock, or with --read or --write
// the read or the write lock of the read/write lock RESOURCE.
func take(o options) func(ctx context.Context, l kahuna.Locker, resource string, opts ...kahuna.AcquireOption) (*kahuna.Lock, error) {
	switch {
	case o.read:
		return func(ctx context.Context, l kahuna.Locker, name string, opts ...kahuna.AcquireOption) (*kahuna.Lock, error) {
			return kahuna.NewRWLock(l, name).RLock(ctx, opts...)
		}
	case o.write:
		return func(ctx context.Context, l kahuna.Locker, name string, opts ...kahuna.AcquireOption) (*kahuna.Lock, error) {
			return kahuna.NewRWLock(l, name).Lock(ctx, opts...)
		}
	}
	return kahuna.Acquire
}

func lock(ctx context.Context, l kahuna.Locker, resource string, o options, out printer, stderr io.Writer) int {
	opts := append(acquireOptions(o), kahuna.WithWait(o.wait))
	down := &outage{stderr: stderr, what: "lock " + lease.Excerpt(resource), out: out, after: 2}
	var lastRetry error // why the last attempt was retried, if no answer came after it
	opts = append(opts, kahuna.WithRetryNotice(func(err error) {
		lastRetry = err
		if o.waitGiven {
			down.notice(err)
		}
	}))
	h, err := take(o)(ctx, l, resource, opts...)
	var se *kahuna.StatusError
	if errors.Is(err, context.DeadlineExceeded) && errors.As(lastRetry, &se) && se.Status == kahuna.MustRetry {
		// The node answered, and kept answering that it cannot serve now.
		fmt.Fprintf(stderr, "kahunactl: lock %s: the nodes kept answering MustRetry until %v ran out: the node is starting, or the partition is electing a leader or moving (kahunactl status says which)\n",
			lease.Excerpt(resource), o.timeout+o.wait)
		return exitError
	}
	name := lockedName(resource, o)
	if err != nil {
		return acquireFailed(out, stderr, name, o.owner, err)
	}
	fields := map[string]any{"resource": name, "status": "Locked", "owner": string(h.Owner()), "fencingToken": h.FencingToken()}
	if mode := lockMode(o); mode != "" {
		fields["mode"] = mode
		out.print(fields, "locked %s for %s owner %s fencing token %d\n", name, mode, h.Owner(), h.FencingToken())
		return exitOK
	}
	out.print(fields, "locked %s owner %s fencing token %d\n", name, h.Owner(), h.FencingToken())
	return exitOK
}

// acquireFailed reports an Acquire that gave up.
func acquireFailed(out printer, stderr io.Writer, resource, owner string, err error) int {
	var se *kahuna.StatusError
	if errors.As(err, &se) {
		return report(out, stderr, "lock", resource, owner, kahuna.Result{Status: se.Status, Reason: se.Reason}, nil, kahuna.Locked)
	}
	return report(out, stderr, "lock", resource, owner, kahuna.Result{}, err, kahuna.Locked)
}

// report prints the outcome of a call and picks the exit code. A fencing
// token is shown only where there is one: a lock, extend or get that
// succeeded. A refusal is said in words (Status.Describe), with the reason
// of an InvalidInput; the text shows at most 64 bytes of the resource.
func report(out printer, stderr io.Writer, op, resource, owner string, r kahuna.Result, err error, success kahuna.Status) int {
	name := lease.Excerpt(resource)
	if err != nil {
		fmt.Fprintf(stderr, "kahunactl: %s %s: %s\n", op, name, out.errorLine(err))
		return exitError
	}
	fields := map[string]any{"resource": resource, "status": r.Status.String()}
	if owner != "" {
		fields["owner"] = owner
	}
	if r.Reason != "" {
		fields["reason"] = r.Reason
	}
	switch r.Status {
	case success:
		if success == kahuna.Unlocked {
			out.print(fields, "%s %s: %s\n", op, resource, r.Status)
			return exitOK
		}
		fields["fencingToken"] = r.FencingToken
		out.print(fields, "%s %s: %s, fencing token %d\n", op, resource, r.Status, r.FencingToken)
		return exitOK
	case kahuna.Busy:
		out.print(fields, "%s %s: %s\n", op, name, r.Status.Describe())
		return exitBusy
	case kahuna.InvalidOwner:
		// Kahuna's unlock answers InvalidOwner for a lock another owner
		// held last even once its lease has expired (extend and get say
		// LockDoesNotExist then): say both, so neither reads as a lie.
		why := r.Status.Describe()
		if op == "unlock" {
			why = "not the owner (another owner holds it, or held it last and its lease has expired)"
		}
		out.print(fields, "%s %s: %s\n", op, name, why)
		return exitLost
	case kahuna.LockDoesNotExist:
		out.print(fields, "%s %s: %s\n", op, name, r.Status.Describe())
		return exitLost
	}
	if r.Reason != "" {
		out.print(fields, "%s %s: %s: %s\n", op, name, r.Status.Describe(), r.Reason)
		return exitError
	}
	out.print(fields, "%s %s: %s\n", op, name, r.Status.Describe())
	return exitError
}

type printer struct {
	w    io.Writer
	json bool
	// What an error message names and how much it says (errorLine).
	endpoints []string
	timeout   time.Duration
	verbose   bool
}

func (p printer) print(fields map[string]any, format string, args ...any) {
	if p.json {
		_ = json.NewEncoder(p.w).Encode(fields)
		return
	}
	fmt.Fprintf(p.w, format, args...)
}
