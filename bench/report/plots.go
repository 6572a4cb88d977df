package report

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// WritePlots draws the plots the results allow into dir and records their
// file names in r.Plots:
//
//   - hot-latency.png: every request of each hot-key run over time, with
//     the loads marked, and the same requests folded around the expiries;
//   - loader-calls.png: loader calls per approach (cold stampede) and
//     loads per expiry (hot key);
//   - scaling.png: loader calls and p99 as processes and keys grow;
//   - coherence.png: the near cache's coherence latencies across
//     processes, as a distribution.
func WritePlots(dir string, r *Results) error {
	r.Plots = nil
	colors := map[string]color.Color{}
	for i, a := range r.Approaches() {
		colors[a] = plotutil.Color(i)
	}
	if len(r.HotSeries) > 0 {
		if err := hotLatency(filepath.Join(dir, "hot-latency.png"), r, colors); err != nil {
			return err
		}
		r.Plots = append(r.Plots, "hot-latency.png")
	}
	if len(r.Cold) > 0 || len(r.Hot) > 0 {
		if err := loaderCalls(filepath.Join(dir, "loader-calls.png"), r, colors); err != nil {
			return err
		}
		r.Plots = append(r.Plots, "loader-calls.png")
	}
	if len(r.ScaleProcs) > 0 || len(r.ScaleKeys) > 0 {
		if err := scaling(filepath.Join(dir, "scaling.png"), r, colors); err != nil {
			return err
		}
		r.Plots = append(r.Plots, "scaling.png")
	}
	if len(r.ColdGap) > 0 {
		if err := coldGapPlot(filepath.Join(dir, "cold-gap.png"), r.ColdGap); err != nil {
			return err
		}
		r.Plots = append(r.Plots, "cold-gap.png")
	}
	if c := r.Coherence; c != nil && len(c.Samples) > 0 && len(c.Rows) > 0 {
		if err := coherencePlot(filepath.Join(dir, "coherence.png"), c, r.CoherencePaced); err != nil {
			return err
		}
		r.Plots = append(r.Plots, "coherence.png")
	}
	return nil
}

// save tiles plots (rows × columns) on one PNG of w × h.
func save(path string, plots [][]*plot.Plot, w, h vg.Length) error {
	img := vgimg.New(w, h)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(plots), Cols: len(plots[0]),
		PadTop: 2 * vg.Millimeter, PadBottom: 2 * vg.Millimeter, PadLeft: 2 * vg.Millimeter, PadRight: 4 * vg.Millimeter,
		PadX: 6 * vg.Millimeter, PadY: 4 * vg.Millimeter}
	canvases := plot.Align(plots, tiles, dc)
	for i := range plots {
		for j := range plots[i] {
			plots[i][j].Draw(canvases[i][j])
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("report: write %s: %w", path, err)
	}
	return f.Close()
}

// loadColor marks when loads start.
func loadColor() color.Color { return color.NRGBA{R: 60, G: 60, B: 60, A: 150} }

// logY sets a log scale on p's Y axis, from lo to hi.
func logY(p *plot.Plot, lo, hi float64) {
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min, p.Y.Max = lo, hi
}

// hotLatency: one row per approach; left the whole run, right the
// requests placed relative to the expiry they are nearest to.
func hotLatency(path string, r *Results, colors map[string]color.Color) error {
	lo, hi := math.Inf(1), 0.0
	var durS float64
	for _, s := range r.HotSeries {
		for i, l := range s.LatMs {
			lo, hi = min(lo, l), max(hi, l)
			durS = max(durS, s.At[i])
		}
	}
	lo, hi = max(0.01, math.Pow(10, math.Floor(math.Log10(max(lo, 0.01))))), math.Pow(10, math.Ceil(math.Log10(max(hi, 1))))
	windowMs := 100.0
	if len(r.Hot) > 0 {
		windowMs = r.Hot[0].WindowMs
	}
	before, after := -windowMs, 3*windowMs

	var rows [][]*plot.Plot
	for _, s := range r.HotSeries {
		c := colors[s.Approach]
		summary := ""
		for _, h := range r.Hot {
			if h.Approach == s.Approach {
				summary = fmt.Sprintf(": %.2f loads per expiry, p99 %s", h.LoadsPerExpiry, ms(h.Overall.P99))
			}
		}

		left := plot.New()
		left.Title.Text = Label(s.Approach) + summary
		left.X.Label.Text = "seconds since start (dashed: a load starts)"
		left.Y.Label.Text = "latency (ms)"
		left.X.Min, left.X.Max = 0, durS
		logY(left, lo, hi)
		for _, at := range s.Loads {
			l, err := plotter.NewLine(plotter.XYs{{X: at, Y: lo}, {X: at, Y: hi}})
			if err != nil {
				return err
			}
			l.Color = loadColor()
			l.Dashes = []vg.Length{vg.Points(3), vg.Points(2)}
			left.Add(l)
		}
		pts := make(plotter.XYs, len(s.At))
		for i := range s.At {
			pts[i] = plotter.XY{X: s.At[i], Y: max(s.LatMs[i], lo)}
		}
		sc, err := plotter.NewScatter(pts)
		if err != nil {
			return err
		}
		sc.GlyphStyle = draw.GlyphStyle{Color: c, Radius: vg.Points(1.2), Shape: draw.CircleGlyph{}}
		left.Add(sc)

		right := plot.New()
		right.Title.Text = "around each expiry, overlaid"
		right.X.Label.Text = "ms since the expiry's first load"
		right.X.Min, right.X.Max = before, after
		logY(right, lo, hi)
		var near plotter.XYs
		for i, at := range s.At {
			for _, e := range s.Expiries {
				if d := (at - e) * 1000; d >= before && d <= after {
					near = append(near, plotter.XY{X: d, Y: max(s.LatMs[i], lo)})
					break
				}
			}
		}
		zero, err := plotter.NewLine(plotter.XYs{{X: 0, Y: lo}, {X: 0, Y: hi}})
		if err != nil {
			return err
		}
		zero.Color = loadColor()
		zero.Dashes = []vg.Length{vg.Points(3), vg.Points(2)}
		right.Add(zero)
		if len(near) > 0 {
			sc, err := plotter.NewScatter(near)
			if err != nil {
				return err
			}
			sc.GlyphStyle = draw.GlyphStyle{Color: c, Radius: vg.Points(1.2), Shape: draw.CircleGlyph{}}
			right.Add(sc)
		}
		rows = append(rows, []*plot.Plot{left, right})
	}
	return save(path, rows, 30*vg.Centimeter, vg.Length(len(rows))*7*vg.Centimeter)
}

// loaderCalls: bars of loader calls (cold) and loads per expiry (hot).
func loaderCalls(path string, r *Results, colors map[string]color.Color) error {
	var row []*plot.Plot
	bars := func(title, ylabel string, names []string, vals []float64, format string) error {
		p := plot.New()
		p.Title.Text = title
		p.Y.Label.Text = ylabel
		p.Y.Min = 0
		w := vg.Points(40)
		for i, v := range vals {
			// One bar chart per approach so each keeps its colour.
			vs := make(plotter.Values, len(vals))
			vs[i] = v
			b, err := plotter.NewBarChart(vs, w)
			if err != nil {
				return err
			}
			b.Color = colors[names[i]]
			b.LineStyle.Width = 0
			p.Add(b)
		}
		labels := make([]string, len(names))
		xys := make(plotter.XYs, len(vals))
		txt := make([]string, len(vals))
		for i, n := range names {
			labels[i] = Label(n)
			xys[i] = plotter.XY{X: float64(i), Y: vals[i]}
			txt[i] = fmt.Sprintf(format, vals[i])
		}
		l, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: txt})
		if err != nil {
			return err
		}
		for i := range l.TextStyle {
			l.TextStyle[i].XAlign = draw.XCenter
		}
		p.Add(l)
		p.NominalX(labels...)
		p.Y.Max = slices.Max(vals) * 1.15
		row = append(row, p)
		return nil
	}
	if len(r.Cold) > 0 {
		var names []string
		var vals []float64
		for _, c := range r.Cold {
			names, vals = append(names, c.Approach), append(vals, float64(c.LoaderCalls))
		}
		title := fmt.Sprintf("cold stampede: %d processes × %d goroutines", r.Cold[0].Procs, r.Cold[0].Goroutines)
		if err := bars(title, "loader calls", names, vals, "%.0f"); err != nil {
			return err
		}
	}
	if len(r.Hot) > 0 {
		var names []string
		var vals []float64
		for _, h := range r.Hot {
			names, vals = append(names, h.Approach), append(vals, h.LoadsPerExpiry)
		}
		title := fmt.Sprintf("hot key: %.0f req/s across %d processes", r.Hot[0].Rate, r.Hot[0].Procs)
		if err := bars(title, "loads per expiry", names, vals, "%.2f"); err != nil {
			return err
		}
	}
	return save(path, [][]*plot.Plot{row}, vg.Length(len(row))*16*vg.Centimeter, 10*vg.Centimeter)
}

// scaling: loader calls and p99 against processes and against keys.
func scaling(path string, r *Results, colors map[string]color.Color) error {
	var rows [][]*plot.Plot
	curve := func(pts []Scale, axis string, logX bool, perKey bool) ([]*plot.Plot, error) {
		calls, p99 := plot.New(), plot.New()
		calls.Title.Text = "loader calls vs " + axis
		p99.Title.Text = "p99 latency vs " + axis
		calls.Y.Label.Text = "loader calls"
		if perKey {
			calls.Y.Label.Text = "loader calls per key"
		}
		p99.Y.Label.Text = "p99 (ms)"
		hiC, hiL := 1.0, 1.0
		var xs []float64
		for _, s := range pts {
			hiC = max(hiC, yCalls(s, perKey))
			hiL = max(hiL, s.Latency.P99)
			if !slices.Contains(xs, float64(s.X)) {
				xs = append(xs, float64(s.X))
			}
		}
		// A decade of headroom keeps the legend (top left) off the curves.
		logY(calls, 0.5, math.Pow(10, math.Ceil(math.Log10(hiC*1.5))+1))
		p99.Y.Min, p99.Y.Max = 0, hiL*1.5 // linear: the values span less than a decade or two
		for _, p := range []*plot.Plot{calls, p99} {
			p.X.Label.Text = axis
			p.X.Tick.Marker = plot.ConstantTicks(ticks(xs))
			if logX {
				p.X.Scale = plot.LogScale{}
			}
			p.Legend.Top = true
			p.Legend.Left = true
		}
		var order []string
		for _, s := range pts {
			if !slices.Contains(order, s.Approach) {
				order = append(order, s.Approach)
			}
		}
		for i, a := range order {
			var c, l plotter.XYs
			for _, s := range pts {
				if s.Approach == a {
					c = append(c, plotter.XY{X: float64(s.X), Y: max(yCalls(s, perKey), 0.5)})
					l = append(l, plotter.XY{X: float64(s.X), Y: s.Latency.P99})
				}
			}
			for _, pair := range []struct {
				p   *plot.Plot
				xys plotter.XYs
			}{{calls, c}, {p99, l}} {
				line, points, err := plotter.NewLinePoints(pair.xys)
				if err != nil {
					return nil, err
				}
				line.Color = colors[a]
				line.Width = vg.Points(1.5)
				points.Color = colors[a]
				points.Shape = plotutil.Shape(i)
				pair.p.Add(line, points)
				pair.p.Legend.Add(Label(a), line, points)
			}
		}
		return []*plot.Plot{calls, p99}, nil
	}
	if len(r.ScaleProcs) > 0 {
		row, err := curve(r.ScaleProcs, "processes", false, false)
		if err != nil {
			return err
		}
		rows = append(rows, row)
	}
	if len(r.ScaleKeys) > 0 {
		row, err := curve(r.ScaleKeys, "distinct keys", true, true)
		if err != nil {
			return err
		}
		rows = append(rows, row)
	}
	return save(path, rows, 30*vg.Centimeter, vg.Length(len(rows))*11*vg.Centimeter)
}

func yCalls(s Scale, perKey bool) float64 {
	if perKey && s.Keys > 0 {
		return float64(s.LoaderCalls) / float64(s.Keys)
	}
	return float64(s.LoaderCalls)
}

func ticks(xs []float64) []plot.Tick {
	out := make([]plot.Tick, len(xs))
	for i, x := range xs {
		out[i] = plot.Tick{Value: x, Label: fmt.Sprint(x)}
	}
	return out
}

// coldGapPlot draws, for each shape of the cold-gap scenario, where a
// request's time goes besides the load itself: from the burst to the
// first loader's start (finding the key absent and claiming it), then
// from the load's end to the median request's return and on to the
// 99th percentile's (the write, the announcement, the wake-up). Medians
// of the runs, as the table gives them.
func coldGapPlot(path string, gaps []ColdGap) error {
	type shape struct{ procs, goroutines int }
	var shapes []shape
	byShape := map[shape][]ColdGap{}
	for _, g := range gaps {
		s := shape{g.Procs, g.Goroutines}
		if _, ok := byShape[s]; !ok {
			shapes = append(shapes, s)
		}
		byShape[s] = append(byShape[s], g)
	}
	var row []*plot.Plot
	for _, s := range shapes {
		gs := byShape[s]
		p := plot.New()
		p.Title.Text = fmt.Sprintf("cold stampede, %d × %d: time besides the load", s.procs, s.goroutines)
		p.X.Label.Text = "ms"
		p.X.Min = 0
		first, p50, p99 := make(plotter.Values, len(gs)), make(plotter.Values, len(gs)), make(plotter.Values, len(gs))
		names := make([]string, len(gs))
		for i, g := range gs {
			names[i] = Label(g.Approach)
			first[i], p50[i], p99[i] = g.FirstLoadMs, g.AfterLoadP50, max(g.AfterLoadP99-g.AfterLoadP50, 0)
		}
		var below *plotter.BarChart
		for i, seg := range []struct {
			vals plotter.Values
			name string
		}{
			{first, "burst → first loader started"},
			{p50, "load's end → median request returned"},
			{p99, "… → 99th percentile returned"},
		} {
			b, err := plotter.NewBarChart(seg.vals, vg.Points(16))
			if err != nil {
				return err
			}
			b.Horizontal = true
			b.Color = plotutil.Color(i)
			b.LineStyle.Width = 0
			if below != nil {
				b.StackOn(below)
			}
			below = b
			p.Add(b)
			p.Legend.Add(seg.name, b)
		}
		most := 0.0
		for i := range gs {
			most = max(most, first[i]+p50[i]+p99[i])
		}
		p.X.Max = most * 1.8 // room for the legend, bottom right, beside the in-process rows
		p.NominalY(names...)
		row = append(row, p)
	}
	return save(path, [][]*plot.Plot{row}, vg.Length(len(row))*16*vg.Centimeter, 11*vg.Centimeter)
}
