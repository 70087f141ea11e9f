package checker

import (
	"bufio"
	"strings"
	"fmt"
	"encoding/json"
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/kahunago/kahuna/lease"
)

var lineRE = regexp.MustCompile(`^#(\d+) c(\d+) (\w+) (\S+)(?: owner=(\S+))?(?: ttl=(\S+))? \[([^,]+), ([^\]\)]+)[\]\)] → (\w+) (\w+)(?: holder=(\S*))?(?: token=(-?\d+))?`)

func parseText(t *testing.T, path string) History {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	statuses := map[string]lease.Status{}
	for s := lease.Status(0); s < 120; s++ {
		statuses[s.String()] = s
	}
	kinds := map[string]Kind{"acquire": Acquire, "extend": Extend, "release": Release, "get": Get}
	outs := map[string]Outcome{"ok": OK, "fail": Fail, "info": Indeterminate}
	var h History
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := lineRE.FindStringSubmatch(sc.Text())
		if m == nil {
			t.Fatalf("bad line %q", sc.Text())
		}
		id, _ := strconv.Atoi(m[1])
		c, _ := strconv.Atoi(m[2])
		var ttl time.Duration
		if m[6] != "" {
			ttl, _ = time.ParseDuration(m[6])
		}
		call, _ := time.ParseDuration(m[7])
		ret, _ := time.ParseDuration(m[8])
		tok, _ := strconv.ParseInt(m[12], 10, 64)
		h = append(h, Op{ID: id, Client: c, Kind: kinds[m[3]], Resource: m[4], Owner: m[5], TTL: ttl, Call: call, Return: ret, Outcome: outs[m[9]], Status: statuses[m[10]], Holder: m[11], Token: tok})
	}
	return h
}

func TestDebugHistory(t *testing.T) {
	path := os.Getenv("HIST")
	res := os.Getenv("RES")
	if path == "" {
		t.Skip()
	}
	var all History
	if strings.HasSuffix(path, ".json") {
		b, _ := os.ReadFile(path)
		json.Unmarshal(b, &all)
	} else {
		all = parseText(t, path)
	}
	if res == "" {
		_, fails := byResource(all)
		for k := range fails {
			if r := CheckLinearizable(fails[k], Options{Margin: 50 * time.Millisecond, Timeout: 10 * time.Second}); r.Result != Linearizable {
				res = k
			}
		}
		t.Logf("failing resource %s", res)
	}
	var h History
	for _, o := range all {
		if o.Resource == res {
			h = append(h, o)
		}
	}
	t.Logf("%d ops", len(h))
	// Find the shortest prefix (by call time) that is not quickly linearizable.
	lo, hi := 0, len(h)
	sorted := append(History(nil), h...)
	for i := range sorted {
		for j := i + 1; j < len(sorted); j++ {
			if sorted[j].Call < sorted[i].Call {
				sorted[i], sorted[j] = sorted[j], sorted[i]
			}
		}
	}
	check := func(n int) Verdict {
		return CheckLinearizable(sorted[:n], Options{Margin: 50 * time.Millisecond, Timeout: 3 * time.Second}).Result
	}
	for lo < hi {
		mid := (lo + hi) / 2
		if check(mid) == Linearizable {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	t.Logf("first bad prefix: %d ops, verdict %s", lo, check(lo))
	from := lo - 60
	if from < 0 {
		from = 0
	}
	t.Logf("tail:\n%s", sorted[from:lo])
}

func TestDebugSim(t *testing.T) {
	if os.Getenv("SIMDBG") == "" {
		t.Skip()
	}
	seed, _ := strconv.Atoi(os.Getenv("SIMDBG"))
	h := runSim(t, uint64(seed), "", 700*time.Millisecond)
	keys, groups := byResource(h)
	for _, k := range keys {
		m, ops := build(groups[k], 2*time.Millisecond)
		steps, maxSet, maxPend := 0, 0, 0
		inner := m.step
		pm := m.porcupine()
		_ = inner
		orig := pm.Step
		pm.Step = func(st, in, out any) (bool, any) {
			steps++
			ok, n := orig(st, in, out)
			if ok {
				ss := n.([]any)
				if len(ss) > maxSet {
					maxSet = len(ss)
				}
				for _, x := range ss {
					if p := len(x.(lockState).pending) / 4; p > maxPend {
						maxPend = p
					}
				}
				if len(ss) > 300 && len(ss) < 340 {
					holders := map[string]int{}
					toks := map[int64]int{}
					pends := map[int]int{}
					for _, x := range ss {
						ls := x.(lockState)
						holders[ls.holder]++
						toks[ls.token]++
						pends[len(ls.pending)/4]++
					}
					t.Logf("set %d: holders %v tokens %v pending sizes %v input %+v", len(ss), holders, toks, pends, in)
					for _, x := range m.table {
						t.Logf("   pending-table %+v", x)
					}
				}
			}
			return ok, n
		}
		pm.StepContext = nil
		r := porcupineCheck(pm, ops, 10*time.Second)
		t.Logf("%s: %d ops, %v, steps %d, max set %d, max pending %d", k, len(ops), r, steps, maxSet, maxPend)
	}
}

func TestDebugFile(t *testing.T) {
	path := os.Getenv("HISTF")
	if path == "" {
		t.Skip()
	}
	h := parseText(t, path)
	r := Check(h, Options{Margin: 50 * time.Millisecond, Timeout: time.Minute})
	t.Logf("%+v lin=%+v excl=%d fence=%d", r.Stats, r.Linearizable, len(r.Exclusion), len(r.Fencing))
}

func TestDebugPrefix(t *testing.T) {
	path := os.Getenv("HISTP")
	if path == "" {
		t.Skip()
	}
	all := parseText(t, path)
	var h History
	for _, o := range all {
		if o.Resource == os.Getenv("RES") {
			h = append(h, o)
		}
	}
	sorted := append(History(nil), h...)
	for i := range sorted {
		for j := i + 1; j < len(sorted); j++ {
			if sorted[j].Call < sorted[i].Call {
				sorted[i], sorted[j] = sorted[j], sorted[i]
			}
		}
	}
	n, _ := strconv.Atoi(os.Getenv("N"))
	m, ops := build(sorted[:n], 50*time.Millisecond)
	steps, maxSet := 0, 0
	pm := m.porcupine()
	orig := pm.Step
	pm.Step = func(st, in, out any) (bool, any) {
		steps++
		ok, n := orig(st, in, out)
		if ok && len(n.([]any)) > maxSet {
			maxSet = len(n.([]any))
			if maxSet > 1000 && maxSet < 1100 {
				holders := map[string]int{}
				toks := map[int64]int{}
				pends := map[int]int{}
				nows := map[int64]int{}
				for _, x := range n.([]any) {
					ls := x.(lockState)
					holders[ls.holder]++
					toks[ls.token]++
					pends[len(ls.pending)/4]++
					nows[ls.now]++
				}
				t.Logf("set %d: holders %v tokens %v pending sizes %v nows %d input %+v", maxSet, holders, toks, pends, len(nows), in)
				for _, x := range n.([]any)[:5] {
					ls := x.(lockState)
					var ids []int
					for k := 0; k < len(ls.pending)/4; k++ {
						ids = append(ids, pendingIdx(ls.pending, k))
					}
					t.Logf("  %+v %v", ls, ids)
				}
			}
		}
		return ok, n
	}
	pm.StepContext = nil
	for i, x := range m.table {
		t.Logf("table %d: %+v", i, x)
	}
	start := time.Now()
	r := porcupineCheck(pm, ops, 60*time.Second)
	t.Logf("%d ops: %v in %v, steps %d, max set %d", len(ops), r, time.Since(start), steps, maxSet)
}

func TestDebugJSON(t *testing.T) {
	path := os.Getenv("HISTJ")
	if path == "" {
		t.Skip()
	}
	b, _ := os.ReadFile(path)
	var h History
	if err := json.Unmarshal(b, &h); err != nil {
		t.Fatal(err)
	}
	keys, groups := byResource(h)
	for _, k := range keys {
		m, ops := build(groups[k], 50*time.Millisecond)
		steps, maxSet, maxPend := 0, 0, 0
		var worst any
		pm := m.porcupine()
		orig := pm.Step
		pm.Step = func(st, in, out any) (bool, any) {
			steps++
			ok, n := orig(st, in, out)
			if ok {
				ss := n.([]any)
				if len(ss) > maxSet {
					maxSet = len(ss)
					worst = n
				}
				for _, x := range ss {
					if p := len(x.(lockState).pending) / 4; p > maxPend {
						maxPend = p
					}
				}
			}
			return ok, n
		}
		pm.StepContext = nil
		start := time.Now()
		r := porcupineCheck(pm, ops, 3*time.Minute)
		t.Logf("%s: %d ops, %d pending ops, %v in %v, steps %d, max set %d, max pending %d", k, len(ops), len(m.table), r, time.Since(start), steps, maxSet, maxPend)
		if worst != nil && os.Getenv("SHOW") != "" {
			holders := map[string]int{}
			toks := map[int64]int{}
			for _, x := range worst.([]any) {
				ls := x.(lockState)
				holders[ls.holder]++
				toks[ls.token]++
			}
			t.Logf("   worst: holders %v tokens %v", holders, toks)
			for i, x := range worst.([]any) {
				if i%400 != 0 {
					continue
				}
				ls := x.(lockState)
				var ps []string
				for k := 0; k < len(ls.pending)/4; k++ {
					op := m.table[pendingIdx(ls.pending, k)]
					ps = append(ps, fmt.Sprintf("%s:%s@%.3f(ment %.3f)", op.kind, op.owner, float64(op.call)/1e9, float64(m.lastMention[op.owner])/1e9))
				}
				t.Logf("   state holder=%q token=%d exp=[%.3f,%.3f] now=%.3f pending=%v anon=%q", ls.holder, ls.token, float64(ls.expLo)/1e9, float64(ls.expHi)/1e9, float64(ls.now)/1e9, ps, ls.anon)
			}
		}
	}
}
