package bench

import (
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/kahunago/kahuna/lease"
)

func parse(args ...string) (*Config, error) {
	return parseArgs("kahuna-bench", args, DefaultTargets(), nil, io.Discard)
}

func TestDefaults(t *testing.T) {
	c, err := parse()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(c.Targets, ",") != "embedded" || c.Workload != WorkloadLock || c.Durability != lease.Ephemeral ||
		c.Concurrency != 64 || c.keys() != 10_000 || c.Rate != 0 || c.Duration != 10*time.Second ||
		c.Warmup != 2*time.Second || c.Timeout != 10*time.Second || c.Format != "console" || !c.Progress {
		t.Errorf("defaults = %+v", c)
	}
	c, _ = parse("--workload", "hot")
	if c.keys() != 1 {
		t.Errorf("hot workload key space = %d, want 1", c.keys())
	}
}

func TestCompareResolvesAliases(t *testing.T) {
	c, err := parse("--compare", "kahuna-embedded, mutex", "--durability", "persistent", "--mix", "lock=1,extend=0,get=2")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.Targets, ","); got != "embedded,mutex" {
		t.Errorf("targets = %s", got)
	}
	if c.Durability != lease.Persistent || mixString(c.Mix) != "lock=1,get=2" {
		t.Errorf("durability %v, mix %v", c.Durability, c.Mix)
	}
}

func TestBadFlagsSayWhy(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--concurrency", "0"}, "--concurrency must be ≥ 1, got 0"},
		{[]string{"--workload", "burst"}, `--workload "burst": want one of lock, hot, extend, get, mixed`},
		{[]string{"--target", "zookeeper"}, `unknown target "zookeeper" (have embedded, mutex, grpc, native, rest)`},
		{[]string{"--compare", "embedded,kahuna-embedded"}, `target "kahuna-embedded" given twice`},
		{[]string{"--target", "rest:ephemeral"}, `target "rest:ephemeral" needs --endpoints`},
		{[]string{"--compare", "embedded:durable"}, `target "embedded:durable": --durability "durable"`},
		{[]string{"--compare", "embedded:persistent,kahuna-embedded:1"}, `target "kahuna-embedded:1" given twice`},
		{[]string{"--workload", "hot-wait", "--wait", "0s"}, "--wait must be > 0"},
		{[]string{"--workload", "hot-wait", "--hold", "-1ms"}, "--hold must be ≥ 0"},
		{[]string{"--workload", "hot-wait", "--wait", "5s", "--hold", "5s", "--timeout", "10s"}, "--timeout 10s must exceed --wait + --hold"},
		{[]string{"--compare", "mutex,rest"}, `target "rest" needs --endpoints`},
		{[]string{"--rate", "-5"}, "--rate must be ≥ 0"},
		{[]string{"--duration", "0s"}, "--duration must be > 0"},
		{[]string{"--warmup", "-1s"}, "--warmup must be ≥ 0"},
		{[]string{"--timeout", "-1s"}, "--timeout must be ≥ 0"},
		{[]string{"--ttl", "0s"}, "--ttl must be > 0"},
		{[]string{"--ttl", "1500us"}, "--ttl must be whole milliseconds"},
		{[]string{"--ttl", "800h"}, "--ttl must be > 0 and ≤"},
		{[]string{"--durability", "durable"}, `--durability "durable": want ephemeral or persistent`},
		{[]string{"--format", "xml"}, `--format "xml": want console, json or csv`},
		{[]string{"--plot", "out.jpg"}, `--plot "out.jpg": the file name must end in .png or .svg`},
		{[]string{"--mix", "lock"}, `--mix: "lock" is not op=weight`},
		{[]string{"--mix", "scan=3"}, `--mix: unknown operation "scan"`},
		{[]string{"--mix", "lock=x"}, "--mix: weight of lock must be a whole number ≥ 0"},
		{[]string{"--workload", "mixed", "--mix", "lock=0"}, "--mix is empty"},
		{[]string{"--key-space", "-1"}, "--key-space must be ≥ 1"},
		{[]string{"--extends", "-1"}, "--extends must be ≥ 0"},
		{[]string{"--streams", "-1"}, "--streams must be ≥ 0"},
		{[]string{"--log-level", "loud"}, `--log-level "loud"`},
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{"--concurrency", "many"}, `invalid value "many" for flag -concurrency`},
	} {
		_, err := parse(c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want it to say %q", c.args, err, c.want)
		}
	}
}

func TestEveryBadFlagIsReportedOnce(t *testing.T) {
	_, err := parse("--concurrency", "0", "--duration", "0s", "--durability", "x")
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	if strings.Count(msg, "durability") != 1 || !strings.Contains(msg, "--concurrency") || !strings.Contains(msg, "--duration") {
		t.Errorf("error = %q, want each problem once", msg)
	}
}

func TestHelp(t *testing.T) {
	var out strings.Builder
	_, err := parseArgs("kahuna-bench", []string{"-help"}, DefaultTargets(), nil, &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("err = %v", err)
	}
	for _, want := range []string{"Targets:", "embedded (kahuna-embedded)", "-concurrency", "-rate"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("help lacks %q", want)
		}
	}
}
