// Package space keeps a node's persistent writes from filling its disk, as
// etcd's NOSPACE alarm does: past a reserve of free disk, or past a quota
// on the store's size, the node refuses new persistent grants (a clear
// status, a metric) long before the disk is full, and lifts the refusal
// once space returns. A failed write to a full disk would stop the whole
// process (dragonboat panics on a failed log write), so the guard's job is
// that it never comes to that.
package space

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Reserve is free disk space to keep: Bytes, or Percent of the file
// system's size (whichever is set).
type Reserve struct {
	Bytes   uint64
	Percent float64
}

// ParseReserve reads "5%" or a size ("512MiB", "1GB", "1048576"; 0 keeps
// no reserve).
func ParseReserve(s string) (Reserve, error) {
	s = strings.TrimSpace(s)
	if p, ok := strings.CutSuffix(s, "%"); ok {
		v, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || v < 0 || v >= 100 {
			return Reserve{}, fmt.Errorf("space: reserve %q: want a percentage from 0 to under 100", s)
		}
		return Reserve{Percent: v}, nil
	}
	b, err := ParseSize(s)
	if err != nil {
		return Reserve{}, fmt.Errorf("space: reserve %q: want a size (512MiB, 1GB) or a percentage (5%%)", s)
	}
	return Reserve{Bytes: b}, nil
}

// ParseSize reads a byte count with an optional unit: B, KB, MB, GB, TB
// (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024).
func ParseSize(s string) (uint64, error) {
	s = strings.TrimSpace(s)
	units := []struct {
		suffix string
		mult   uint64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}}
	mult := uint64(1)
	for _, u := range units {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = strings.TrimSpace(n), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("space: size %q: want a non-negative number with an optional unit", s)
	}
	return uint64(v * float64(mult)), nil
}

// bytes is the reserve on a file system of total bytes.
func (r Reserve) bytes(total uint64) uint64 {
	if r.Percent > 0 {
		return uint64(float64(total) * r.Percent / 100)
	}
	return r.Bytes
}

func (r Reserve) String() string {
	if r.Percent > 0 {
		return strconv.FormatFloat(r.Percent, 'f', -1, 64) + "%"
	}
	return FormatBytes(r.Bytes)
}

// FormatBytes writes n in MiB or GiB.
func FormatBytes(n uint64) string {
	if n >= 1<<30 {
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// Config sets what a Guard watches.
type Config struct {
	Dirs    []string // the data dir first, and the WAL dir if it is elsewhere
	Reserve Reserve  // free space to keep on each dir's file system
	Quota   uint64   // most bytes the dirs may hold together (0: no quota)
	// Statfs reports a dir's free and total bytes (default: the file
	// system's, as an unprivileged process may use them); tests swap it.
	Statfs func(dir string) (free, total uint64, err error)
	// Size reports the bytes under dir (default: the sum of its files).
	Size func(dir string) (uint64, error)
}

// Usage is one measurement.
type Usage struct {
	Free  uint64 // least free bytes over the dirs' file systems
	Store uint64 // bytes the dirs hold
}

// Guard measures the dirs and says whether persistent writes must stop.
type Guard struct {
	cfg      Config
	exceeded atomic.Pointer[string] // nil: writes may go on; else why not
	usage    atomic.Pointer[Usage]
}

// New returns a Guard; call Check once before trusting Exceeded.
func New(cfg Config) *Guard {
	if cfg.Statfs == nil {
		cfg.Statfs = statfs
	}
	if cfg.Size == nil {
		cfg.Size = DirSize
	}
	return &Guard{cfg: cfg}
}

// hysteresis: a refusal is lifted only once the free space is this much
// above the reserve (and the store this much below the quota), so it does
// not flap on every write.
const hysteresis = 0.05

// Check measures the dirs now and updates Exceeded. It returns the usage
// and, when writes must stop, why.
func (g *Guard) Check() (Usage, string, error) {
	u := Usage{Free: ^uint64(0)}
	refused := g.exceeded.Load() != nil
	var why string
	for _, dir := range g.cfg.Dirs {
		free, total, err := g.cfg.Statfs(dir)
		if err != nil {
			return Usage{}, "", fmt.Errorf("space: statfs %s: %w", dir, err)
		}
		u.Free = min(u.Free, free)
		reserve := g.cfg.Reserve.bytes(total)
		limit := reserve
		if refused {
			limit += uint64(float64(reserve) * hysteresis)
		}
		if reserve > 0 && free < limit && why == "" {
			why = fmt.Sprintf("no space: %s has %s free, below the reserve of %s (--disk-reserve %s)", dir, FormatBytes(free), FormatBytes(reserve), g.cfg.Reserve)
		}
		size, err := g.cfg.Size(dir)
		if err != nil {
			return Usage{}, "", fmt.Errorf("space: size of %s: %w", dir, err)
		}
		u.Store += size
	}
	if q := g.cfg.Quota; q > 0 && why == "" {
		limit := q
		if refused {
			limit -= uint64(float64(q) * hysteresis)
		}
		if u.Store > limit {
			why = fmt.Sprintf("no space: the store holds %s, over its quota of %s (--store-quota)", FormatBytes(u.Store), FormatBytes(q))
		}
	}
	g.usage.Store(&u)
	if why == "" {
		g.exceeded.Store(nil)
	} else {
		g.exceeded.Store(&why)
	}
	return u, why, nil
}

// Exceeded reports whether persistent writes must stop, and why, as of the
// last Check.
func (g *Guard) Exceeded() (string, bool) {
	if why := g.exceeded.Load(); why != nil {
		return *why, true
	}
	return "", false
}

// Usage is the last Check's measurement.
func (g *Guard) Usage() Usage {
	if u := g.usage.Load(); u != nil {
		return *u
	}
	return Usage{}
}

// Run checks every interval until ctx ends, calling changed whenever the
// refusal starts or ends (why is "" when it ends).
func (g *Guard) Run(ctx context.Context, every time.Duration, changed func(why string), failed func(error)) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		_, was := g.Exceeded()
		_, why, err := g.Check()
		if err != nil {
			failed(err)
			continue
		}
		if now := why != ""; now != was {
			changed(why)
		}
	}
}

// DirSize is the sum of the sizes of the files under dir.
func DirSize(dir string) (uint64, error) {
	var total uint64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // a file removed during the walk
		}
		if !d.IsDir() {
			if info, err := d.Info(); err == nil {
				total += uint64(info.Size())
			}
		}
		return nil
	})
	return total, err
}
