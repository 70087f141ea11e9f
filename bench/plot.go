package bench

import (
	"fmt"
	"math"
	"strings"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// maxNines is how far into the tail the chart goes: 99.999%.
const maxNines = 5

// writePlot draws every target's latency percentile distribution on one
// chart, the way HdrHistogram's plotter does: x is the percentile on a
// "number of nines" scale (0%, 90%, 99%, 99.9%, …), y the latency in ms on a
// log scale, so a sub-microsecond mutex and a disk-bound service share it.
// The format follows the file's extension (.png or .svg).
func writePlot(path string, p Parameters, results []Result) error {
	pl := plot.New()
	// No durability in the title: it is kahuna's alone (Redis and etcd
	// curves have none), and a target run at another one is named
	// NAME:durability in the legend.
	pl.Title.Text = fmt.Sprintf("%s workload, %d callers: latency by percentile", p.Workload, p.Concurrency)
	if p.Rate > 0 {
		pl.Title.Text = fmt.Sprintf("%s workload, open loop %s ops/s: latency by percentile", p.Workload, fmtCount(p.Rate))
	}
	pl.X.Label.Text = "percentile"
	pl.Y.Label.Text = "latency"
	pl.Y.Scale = plot.LogScale{}
	pl.Y.Tick.Marker = durationTicks{}
	var ticks []plot.Tick
	for n := 0; n <= maxNines; n++ {
		ticks = append(ticks, plot.Tick{Value: float64(n), Label: ninesLabel(n)})
	}
	pl.X.Tick.Marker = plot.ConstantTicks(ticks)
	pl.X.Min, pl.X.Max = 0, maxNines

	drawn := 0
	for i, res := range results {
		pts := percentileCurve(res.hist)
		if len(pts) == 0 {
			continue
		}
		line, err := plotter.NewLine(pts)
		if err != nil {
			return fmt.Errorf("plot %s: %w", res.label(), err)
		}
		line.Color = plotutil.Color(i)
		line.Width = vg.Points(1.5)
		pl.Add(line)
		pl.Legend.Add(res.label(), line)
		drawn++
	}
	if drawn == 0 {
		return fmt.Errorf("plot: no target had a successful operation to draw")
	}
	pl.Add(plotter.NewGrid())
	if err := pl.Save(8*vg.Inch, 5*vg.Inch, path); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return nil
}

// percentileCurve samples h along the nines scale: x = -log10(1 - q), as far
// into the tail as the sample count supports (1,000 samples say nothing of
// the 99.99th percentile). y is in milliseconds.
func percentileCurve(h *hdr.Histogram) plotter.XYs {
	n := h.TotalCount()
	if n == 0 {
		return nil
	}
	limit := min(math.Log10(float64(n)), maxNines)
	pts := plotter.XYs{{X: 0, Y: float64(max(h.Min(), 1)) / 1e6}} // the library's q=0 is 0, not the minimum
	for x := 0.05; x <= limit+1e-9; x += 0.05 {
		q := 100 * (1 - math.Pow(10, -x))
		pts = append(pts, plotter.XY{X: x, Y: float64(max(h.ValueAtQuantile(q), 1)) / 1e6})
	}
	return pts
}

// durationTicks are the log scale's ticks (in ms) labelled as durations:
// 100ns, 1µs, 10ms, 1s.
type durationTicks struct{}

func (durationTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.LogTicks{}.Ticks(lo, hi)
	for i, t := range ticks {
		if t.Label != "" {
			ticks[i].Label = time.Duration(math.Round(t.Value * 1e6)).String()
		}
	}
	return ticks
}

// ninesLabel names n nines: 0%, 90%, 99%, 99.9%, …
func ninesLabel(n int) string {
	switch n {
	case 0:
		return "0%"
	case 1:
		return "90%"
	case 2:
		return "99%"
	}
	return "99." + strings.Repeat("9", n-2) + "%"
}
