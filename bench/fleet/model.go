package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// assumptions are the model's inputs that are not measured.
type assumptions struct {
	rates      []float64 // writes per second across the fleet; the first is the table's
	waitFrac   float64   // fraction of the instances waiting for a written key
	nicBytes   float64   // the server's network bandwidth, bytes per second
	opsPerCore float64   // messages per second one server core sends
	sizes      []int     // fleet sizes to model
	held       float64   // keys each instance holds in its near cache
}

// linear is y = a + b·x.
type linear struct{ a, b float64 }

func (l linear) at(x float64) float64 { return l.a + l.b*x }

// fit returns the least-squares line through (xs, ys); with one point, a
// flat line through it.
func fit(xs, ys []float64) linear {
	n := float64(len(xs))
	if n == 0 {
		return linear{}
	}
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx, sy = sx+xs[i], sy+ys[i]
		sxx, sxy = sxx+xs[i]*xs[i], sxy+xs[i]*ys[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return linear{a: sy / n}
	}
	b := (n*sxy - sx*sy) / d
	return linear{a: (sy - b*sx) / n, b: b}
}

// costs are one design's costs per write as lines in the number of
// processes N.
type costs struct {
	msgs, invals, bytes, cpu linear
}

// designModel is what the model knows of one design on one server kind.
type designModel struct {
	server, design string
	idle, wait     costs   // fitted on each phase's points
	waitFrac       float64 // measured: waiters per write / N in the wait phase
	perWaiter      costs   // extra cost per waiting process: (wait slope − idle slope) / waitFrac
	memPerProc     float64 // server memory per open process, bytes (at the largest measured N)
	trackItem      float64 // near: server memory per tracking-table item, bytes; 0 if none was measured
	near           bool
}

// model is the designs' models, in the order they were measured.
type model []designModel

// fitModel fits each design's per-write costs on its measured points.
func fitModel(pts []point) model {
	var m model
	for _, p := range pts {
		if !slices.ContainsFunc(m, func(d designModel) bool { return d.server == p.Server && d.design == p.Design }) {
			m = append(m, designModel{server: p.Server, design: p.Design})
		}
	}
	for i := range m {
		d := &m[i]
		maxN := 0
		for _, phase := range []string{"idle", "wait"} {
			var xs, msgs, invals, bytes, cpu, fr []float64
			for _, p := range pts {
				if p.Server != d.server || p.Design != d.design || p.Phase != phase {
					continue
				}
				xs = append(xs, float64(p.N))
				msgs = append(msgs, p.perWrite(float64(p.msgs())))
				invals = append(invals, p.perWrite(float64(p.Delta.Invals)))
				bytes = append(bytes, p.perWrite(float64(p.ServerBytes)))
				cpu = append(cpu, p.perWrite(p.CPU))
				if p.N >= maxN {
					maxN, d.memPerProc = p.N, p.MemPerProc
				}
				if p.Holders > 0 {
					d.near = true
					if p.TrackMem > 0 {
						d.trackItem = p.TrackMem // the largest N's, as memory
					}
				}
				if p.N > 1 {
					fr = append(fr, float64(p.Waiters)/float64(p.N))
				}
			}
			c := costs{fit(xs, msgs), fit(xs, invals), fit(xs, bytes), fit(xs, cpu)}
			if phase == "idle" {
				d.idle = c
			} else if len(xs) > 0 {
				d.wait = c
				d.waitFrac = mean(fr)
			}
		}
		if d.waitFrac > 0 {
			extra := func(w, i linear) linear { return linear{b: math.Max(0, (w.b-i.b)/d.waitFrac)} }
			d.perWaiter = costs{extra(d.wait.msgs, d.idle.msgs), extra(d.wait.invals, d.idle.invals),
				extra(d.wait.bytes, d.idle.bytes), extra(d.wait.cpu, d.idle.cpu)}
		}
	}
	return m
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// perWrite returns d's costs per write for n instances of which the
// fraction frac waits for the written key: the idle fleet's line plus
// each waiter's extra.
func (d *designModel) perWrite(n, frac float64) (msgs, bytes, cpu float64) {
	w := frac * n
	msgs = d.idle.msgs.at(n) + d.idle.invals.at(n) + w*d.perWaiter.msgs.b
	bytes = d.idle.bytes.at(n) + w*d.perWaiter.bytes.b
	cpu = d.idle.cpu.at(n) + w*d.perWaiter.cpu.b
	return max(msgs, 0), max(bytes, 0), max(cpu, 0)
}

// limit returns the fleet size at which a cost per write of a + b·N, at
// rate writes per second, reaches capacity per second; +Inf if it never
// does.
func limit(a, b, rate, capacity float64) float64 {
	if b <= 0 {
		return math.Inf(1)
	}
	return math.Max(0, (capacity/rate-a)/b)
}

// printModel writes the model's constants, its predictions next to every
// measured point, the table for large fleets and where each design hits
// a server limit.
func printModel(w io.Writer, m model, pts []point, a assumptions) {
	fmt.Fprintln(w, "Model: per write, cost = a + b·N (fitted on the idle fleet) + waiters × per-waiter cost (the wait phase's extra slope ÷ its waiting fraction)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| server | design | msgs/write a + b·N | B/write a + b·N | CPU µs/write a + b·N | per waiter: msgs, B, CPU µs | server KiB/process |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, d := range m {
		fmt.Fprintf(w, "| %s | %s | %.2f + %.3f·N | %.0f + %.1f·N | %.1f + %.2f·N | %.2f, %.0f, %.1f | %.1f |\n", d.server, d.design,
			d.idle.msgs.a+d.idle.invals.a, d.idle.msgs.b+d.idle.invals.b, d.idle.bytes.a, d.idle.bytes.b,
			d.idle.cpu.a*1e6, d.idle.cpu.b*1e6, d.perWaiter.msgs.b, d.perWaiter.bytes.b, d.perWaiter.cpu.b*1e6, d.memPerProc/1024)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Model against measurement, every measured point (idle: no waiters; wait: the measured waiters)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| server | design | phase | N | msgs/write measured / model | B/write measured / model | CPU µs/write measured / model |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, p := range pts {
		i := slices.IndexFunc(m, func(d designModel) bool { return d.server == p.Server && d.design == p.Design })
		d := &m[i]
		frac := float64(p.Waiters) / float64(p.N)
		msgs, bytes, cpu := d.perWrite(float64(p.N), frac)
		if p.Phase == "wait" {
			// The wait phase's writes are rebuilds only: its own line.
			msgs, bytes, cpu = d.wait.msgs.at(float64(p.N))+d.wait.invals.at(float64(p.N)), d.wait.bytes.at(float64(p.N)), d.wait.cpu.at(float64(p.N))
		}
		fmt.Fprintf(w, "| %s | %s | %s | %d | %.2f / %.2f | %.0f / %.0f | %.1f / %.1f |\n", p.Server, p.Design, p.Phase, p.N,
			p.perWrite(float64(p.msgs()+p.Delta.Invals)), msgs, p.perWrite(float64(p.ServerBytes)), bytes, p.perWrite(p.CPU)*1e6, cpu*1e6)
	}
	fmt.Fprintln(w)

	rate := a.rates[0]
	fmt.Fprintf(w, "Modelled fleets: %.0f writes/s across the fleet, %.2f%% of the instances waiting for each written key; near cache: %.0f keys held per instance; CPU from this shared machine (an upper bound)\n\n",
		rate, a.waitFrac*100, a.held)
	fmt.Fprintln(w, "| server | design | instances | msgs/write | msgs/s at the server | msgs/s per instance | bytes/s on the wire | server CPU (cores) | server memory for the fleet's connections | tracking table |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
	for _, d := range m {
		for _, n := range a.sizes {
			msgs, bytes, cpu := d.perWrite(float64(n), a.waitFrac)
			track := "–"
			if d.near {
				track = size(float64(n) * a.held * d.trackItem)
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s/s | %.2f | %s | %s |\n", d.server, d.design, count(float64(n)), count(msgs),
				count(rate*msgs), count(rate*msgs/float64(n)), size(rate*bytes), rate*cpu, size(float64(n)*d.memPerProc), track)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Where each design hits a server limit (instances; one core for the server's main thread; %.0f msgs/s per core; a %.0f Gbit/s NIC)\n\n",
		a.opsPerCore, a.nicBytes*8/1e9)
	fmt.Fprintln(w, "| server | design | writes/s | CPU (measured cost) | msgs/s per core | NIC |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, d := range m {
		for _, r := range a.rates {
			f := a.waitFrac
			msgsA, msgsB := d.idle.msgs.a+d.idle.invals.a, d.idle.msgs.b+d.idle.invals.b+f*d.perWaiter.msgs.b
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", d.server, d.design, count(r),
				count(limit(d.idle.cpu.a, d.idle.cpu.b+f*d.perWaiter.cpu.b, r, 1)),
				count(limit(msgsA, msgsB, r, a.opsPerCore)),
				count(limit(d.idle.bytes.a, d.idle.bytes.b+f*d.perWaiter.bytes.b, r, a.nicBytes)))
		}
	}
}

// count formats n for a table: 1,234 or 12.3k or 1.2M; "never" for +Inf.
func count(n float64) string {
	switch {
	case math.IsInf(n, 1):
		return "never"
	case n >= 10e6:
		return fmt.Sprintf("%.0fM", n/1e6)
	case n >= 1e6:
		return fmt.Sprintf("%.1fM", n/1e6)
	case n >= 10e3:
		return fmt.Sprintf("%.0fk", n/1e3)
	case n >= 100:
		return withCommas(int64(math.Round(n)))
	case n >= 10:
		return fmt.Sprintf("%.1f", n)
	}
	return fmt.Sprintf("%.2f", n)
}

func withCommas(n int64) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// size formats bytes as B, KB, MB or GB (powers of 1000).
func size(b float64) string {
	switch {
	case b >= 1e9:
		return fmt.Sprintf("%.1f GB", b/1e9)
	case b >= 1e6:
		return fmt.Sprintf("%.1f MB", b/1e6)
	case b >= 1e3:
		return fmt.Sprintf("%.1f kB", b/1e3)
	}
	return fmt.Sprintf("%.0f B", b)
}
