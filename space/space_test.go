package space

import (
	"strings"
	"testing"
)

func TestParseReserve(t *testing.T) {
	for in, want := range map[string]Reserve{
		"5%": {Percent: 5}, "256MiB": {Bytes: 256 << 20}, "1GB": {Bytes: 1e9}, "0": {}, "1048576": {Bytes: 1 << 20}, " 2 GiB ": {Bytes: 2 << 30},
	} {
		got, err := ParseReserve(in)
		if err != nil || got != want {
			t.Errorf("ParseReserve(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "100%", "x%", "12XB", "MiB"} {
		if _, err := ParseReserve(in); err == nil {
			t.Errorf("ParseReserve(%q): no error", in)
		}
	}
}

type fakeDisk struct{ free, total, size uint64 }

func (d *fakeDisk) guard(r Reserve, quota uint64) *Guard {
	return New(Config{Dirs: []string{"/data"}, Reserve: r, Quota: quota,
		Statfs: func(string) (uint64, uint64, error) { return d.free, d.total, nil },
		Size:   func(string) (uint64, error) { return d.size, nil },
	})
}

// Writes stop below the reserve and resume only 5% above it.
func TestGuardReserveWithHysteresis(t *testing.T) {
	d := &fakeDisk{free: 500 << 20, total: 1 << 30}
	g := d.guard(Reserve{Bytes: 100 << 20}, 0)
	steps := []struct {
		free   uint64
		refuse bool
	}{
		{500 << 20, false},
		{99 << 20, true},
		{104 << 20, true}, // above the reserve, within the hysteresis
		{106 << 20, false},
		{101 << 20, false},
	}
	for _, s := range steps {
		d.free = s.free
		_, why, err := g.Check()
		if err != nil {
			t.Fatal(err)
		}
		if _, refused := g.Exceeded(); refused != s.refuse || (why != "") != s.refuse {
			t.Fatalf("free %d MiB: refused %v (%q), want %v", s.free>>20, refused, why, s.refuse)
		}
		if s.refuse && !strings.Contains(why, "below the reserve of 100.0 MiB") {
			t.Fatalf("reason %q does not say what is wrong", why)
		}
	}
	if u := g.Usage(); u.Free != 101<<20 {
		t.Fatalf("Usage().Free = %d", u.Free)
	}
}

// A percentage reserve scales with the file system; a quota caps the store.
func TestGuardPercentAndQuota(t *testing.T) {
	d := &fakeDisk{free: 40 << 20, total: 1 << 30}
	if _, why, _ := d.guard(Reserve{Percent: 5}, 0).Check(); why == "" {
		t.Fatal("40 MiB free of 1 GiB is below a 5% reserve")
	}
	d.free = 60 << 20
	if _, why, _ := d.guard(Reserve{Percent: 5}, 0).Check(); why != "" {
		t.Fatalf("60 MiB free of 1 GiB refused under a 5%% reserve: %s", why)
	}
	d.size = 300 << 20
	g := d.guard(Reserve{}, 256<<20)
	if _, why, _ := g.Check(); !strings.Contains(why, "over its quota") {
		t.Fatalf("store of 300 MiB over a 256 MiB quota: %q", why)
	}
	d.size = 250 << 20 // under the quota, within the hysteresis
	if _, why, _ := g.Check(); why == "" {
		t.Fatal("lifted within the hysteresis")
	}
	d.size = 200 << 20
	if _, why, _ := g.Check(); why != "" {
		t.Fatalf("still refused at 200 MiB: %s", why)
	}
}
