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
	rates      []float64 // rebuilds (writes) per second across the fleet; the first is the table's
	waitFrac   float64   // fraction of the instances waiting for a rebuilt key
	holdFrac   float64   // near cache: fraction of the instances holding a written key
	nicBytes   float64   // the server's network bandwidth, bytes per second
	opsPerCore float64   // messages per second one server core sends
	sizes      []int     // fleet sizes to model
	held       float64   // keys each instance holds in its near cache
}

// plane is y = a + b·N + c·w: a cost per write in the fleet size N and
// the waiters (or holders) w of the written key.
type plane struct{ a, b, c float64 }

func (p plane) at(n, w float64) float64 { return p.a + p.b*n + p.c*w }

// fitPlane returns the least-squares plane through the points (ns, ws,
// ys). A cost cannot fall as the fleet or the waiters grow: a negative
// coefficient (noise, or a term the points cannot tell apart from the
// other) is dropped and the rest fitted again.
func fitPlane(ns, ws, ys []float64) plane { return fitTerms(ns, ws, ys, true) }

// fitTerms is fitPlane, with the N term only if withN.
func fitTerms(ns, ws, ys []float64, withN bool) plane {
	useB, useC := withN, true
	for {
		p := solve(ns, ws, ys, useB, useC)
		switch {
		case useB && p.b < 0:
			useB = false
		case useC && p.c < 0:
			useC = false
		default:
			return p
		}
	}
}

// solve fits a (and b, c where asked) by the normal equations; a term
// the points do not determine (a singular system) is left out.
func solve(ns, ws, ys []float64, useB, useC bool) plane {
	if len(ys) == 0 {
		return plane{}
	}
	var cols [][]float64 // regressors: 1, N, w
	ones := make([]float64, len(ys))
	for i := range ones {
		ones[i] = 1
	}
	cols = append(cols, ones)
	if useB {
		cols = append(cols, ns)
	}
	if useC {
		cols = append(cols, ws)
	}
	k := len(cols)
	m := make([][]float64, k) // [XᵀX | Xᵀy]
	for i := range k {
		m[i] = make([]float64, k+1)
		for j := range k {
			for r := range ys {
				m[i][j] += cols[i][r] * cols[j][r]
			}
		}
		for r := range ys {
			m[i][k] += cols[i][r] * ys[r]
		}
	}
	for i := range k { // Gauss-Jordan with partial pivoting
		piv := i
		for r := i + 1; r < k; r++ {
			if math.Abs(m[r][i]) > math.Abs(m[piv][i]) {
				piv = r
			}
		}
		if math.Abs(m[piv][i]) < 1e-9*math.Max(1, math.Abs(m[0][0])) {
			// Singular: drop the last term asked for and try again.
			if useC {
				return solve(ns, ws, ys, useB, false)
			}
			return solve(ns, ws, ys, false, false)
		}
		m[i], m[piv] = m[piv], m[i]
		for r := range k {
			if r != i {
				f := m[r][i] / m[i][i]
				for j := i; j <= k; j++ {
					m[r][j] -= f * m[i][j]
				}
			}
		}
	}
	x := make([]float64, k)
	for i := range k {
		x[i] = m[i][k] / m[i][i]
	}
	p := plane{a: x[0]}
	i := 1
	if useB {
		p.b, i = x[i], i+1
	}
	if useC {
		p.c = x[i]
	}
	return p
}

// costs are one kind of write's costs per write.
type costs struct {
	msgs, bytes, cpu plane
}

func (c costs) at(n, w float64) (msgs, bytes, cpu float64) {
	return math.Max(0, c.msgs.at(n, w)), math.Max(0, c.bytes.at(n, w)), math.Max(0, c.cpu.at(n, w))
}

// designModel is what the model knows of one design on one server kind.
type designModel struct {
	server, design string
	near           bool    // the near cache on: w counts the holders of the written key
	idle           costs   // Set, Delete and rebuild with nobody waiting (near: w = holders)
	wait           costs   // rebuilds with w waiters (not measured with near)
	memPerProc     float64 // server memory per open process, bytes (at the largest measured N)
	trackItem      float64 // near: server memory per tracking-table item, bytes; 0 if none was measured
	bgBytes, bgCPU float64 // without writes, per process and second: server bytes, server CPU seconds
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
		d.near = slices.ContainsFunc(pts, func(p point) bool { return p.Server == d.server && p.Design == d.design && p.Holders > 0 })
		maxN := 0
		var items []float64
		for _, phase := range []string{"idle", "wait"} {
			var ns, ws, msgs, bytes, cpu []float64
			for _, p := range pts {
				if p.Server != d.server || p.Design != d.design || p.Phase != phase {
					continue
				}
				ns = append(ns, float64(p.N))
				ws = append(ws, float64(p.Waiters+p.Holders))
				msgs = append(msgs, p.perWrite(float64(p.msgs()+p.Delta.Invals)))
				bytes = append(bytes, p.perWrite(float64(p.ServerBytes)))
				cpu = append(cpu, p.perWrite(p.CPU))
				if p.N >= maxN {
					maxN, d.memPerProc = p.N, p.MemPerProc
				}
				if p.TrackMem > 0 {
					items = append(items, p.TrackMem)
				}
			}
			// With the near cache the holders are a share of N, so the
			// two cannot be told apart; tracking is targeted, so a
			// process that holds nothing costs nothing: w only. Bytes
			// and CPU grow with N only where the messages do: on this
			// shared machine the CPU wanders by a few µs per write with
			// or without a fleet, which a free N term would extrapolate
			// to thousands of instances.
			withN := !d.near
			mf := fitTerms(ns, ws, msgs, withN)
			withN = withN && mf.b > 0.01
			c := costs{mf, fitTerms(ns, ws, bytes, withN), fitTerms(ns, ws, cpu, withN)}
			if phase == "idle" {
				d.idle = c
			} else {
				d.wait = c
			}
		}
		d.trackItem = median(items)
		// Without writes: the server's bytes and CPU per second as a line
		// in N; its slope is each process's share (the server's own
		// housekeeping is the intercept).
		var ns, zero, bgB, bgC []float64
		for _, p := range pts {
			if p.Server == d.server && p.Design == d.design && p.Phase == "quiet" && p.Elapsed > 0 {
				secs := p.Elapsed.Seconds()
				ns, zero = append(ns, float64(p.N)), append(zero, 0)
				bgB, bgC = append(bgB, float64(p.ServerBytes)/secs), append(bgC, p.CPU/secs)
			}
		}
		d.bgBytes, d.bgCPU = fitPlane(ns, zero, bgB).b, fitPlane(ns, zero, bgC).b
	}
	return m
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// perWrite returns d's costs per write in a fleet of n instances: a
// rebuild that the fraction a.waitFrac of them waits for, or with the near
// cache a write to a key the fraction a.holdFrac of them holds.
//
// In the near phase a holder does not read the key again, so it is told
// of the key's first write only; the model has every holder told of every
// write (as holders of a hot key that read it again are), at the cost per
// invalidation measured: the holders' slope over the invalidations'.
func (d *designModel) perWrite(n float64, a assumptions) (msgs, bytes, cpu float64) {
	if !d.near {
		return d.wait.at(n, a.waitFrac*n)
	}
	h := a.holdFrac * n
	perB, perCPU := d.perInvalidation()
	return d.idle.msgs.a + h, math.Max(0, d.idle.bytes.a) + h*perB, math.Max(0, d.idle.cpu.a) + h*perCPU
}

// perInvalidation returns the near cache's cost of one invalidation:
// bytes and server CPU seconds.
func (d *designModel) perInvalidation() (bytes, cpu float64) {
	if d.idle.msgs.c <= 0 {
		return 0, 0
	}
	return d.idle.bytes.c / d.idle.msgs.c, d.idle.cpu.c / d.idle.msgs.c
}

// Tracking-table constants the run does not measure: the server's
// default bound on the keys it tracks (tracking-table-max-keys; beyond it
// it evicts keys from the table by invalidating them), and the memory of
// each further process that read a key already in the table (an entry in
// the key's set of client IDs, per the Redis source).
const (
	trackMaxKeys   = 1_000_000
	trackPerReader = 8
)

// trackingMemory returns the server's tracking-table memory for n
// instances each holding a.held keys, each key held by a.holdFrac of them
// (at least one): perKey (measured with one reader per key) for each
// distinct key, up to trackMaxKeys, and trackPerReader for each further
// reader of a key.
func trackingMemory(n float64, a assumptions, perKey float64) float64 {
	items := n * a.held
	keys := math.Min(items/math.Max(1, a.holdFrac*n), trackMaxKeys)
	items = math.Min(items, keys*math.Max(1, a.holdFrac*n))
	return keys*perKey + (items-keys)*trackPerReader
}

// limit returns the fleet size at which a cost per write of y(N), growing
// with N, at rate writes per second reaches capacity per second; +Inf if
// it never does.
func limit(y func(n float64) float64, rate, capacity float64) float64 {
	a, b := y(0), y(1)-y(0)
	if b <= 0 {
		return math.Inf(1)
	}
	return math.Max(0, (capacity/rate-a)/b)
}

// printModel writes the model's constants, its predictions next to every
// measured point, the table for large fleets and where each design hits
// a server limit.
func printModel(w io.Writer, m model, pts []point, a assumptions) {
	fmt.Fprintln(w, "Model: cost per write = a + b·N + c·w, least squares over the measured points: N processes, w waiting for the rebuilt key (wait phase)")
	fmt.Fprintln(w, "or holding the written key in their near cache (near); the idle phase has w = 0. A cost cannot fall with N or w: a negative term is dropped.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| server | design | phase | msgs/write | B/write | server CPU µs/write | server KiB/process | tracking B/item |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, d := range m {
		phases := []struct {
			name string
			c    costs
		}{{"idle", d.idle}, {"wait", d.wait}}
		if d.near {
			phases = phases[:1]
		}
		for _, ph := range phases {
			track := "–"
			if d.near {
				b, c := d.perInvalidation()
				track = fmt.Sprintf("%.0f (per invalidation: %.0f B, %.1f µs)", d.trackItem, b, c*1e6)
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %.1f | %s |\n", d.server, d.design, ph.name,
				planeText(ph.c.msgs, 1, "%.2f"), planeText(ph.c.bytes, 1, "%.1f"), planeText(ph.c.cpu, 1e6, "%.2f"), d.memPerProc/1024, track)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Model against measurement, every measured point")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| server | design | phase | N | w | msgs/write measured / model | B/write measured / model | CPU µs/write measured / model |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, p := range pts {
		if p.Phase == "quiet" {
			continue
		}
		i := slices.IndexFunc(m, func(d designModel) bool { return d.server == p.Server && d.design == p.Design })
		c := m[i].idle
		if p.Phase == "wait" {
			c = m[i].wait
		}
		wv := p.Waiters + p.Holders
		msgs, bytes, cpu := c.at(float64(p.N), float64(wv))
		fmt.Fprintf(w, "| %s | %s | %s | %d | %d | %.2f / %.2f | %.0f / %.0f | %.1f / %.1f |\n", p.Server, p.Design, p.Phase, p.N, wv,
			p.perWrite(float64(p.msgs()+p.Delta.Invals)), msgs, p.perWrite(float64(p.ServerBytes)), bytes, p.perWrite(p.CPU)*1e6, cpu*1e6)
	}
	fmt.Fprintln(w)

	rate := a.rates[0]
	fmt.Fprintf(w, "Modelled fleets: %.0f rebuilds/s across the fleet, each awaited by %.2f%% of the instances (near: writes at the same rate to keys %.1f%% of the instances hold,\n",
		rate, a.waitFrac*100, a.holdFrac*100)
	fmt.Fprintf(w, "each holder told of each write; %.0f keys held per instance, so %s distinct keys, at most %s tracked: the tracking table is the measured bytes per key\n", a.held, count(a.held/math.Max(a.holdFrac, 1e-9)), count(trackMaxKeys))
	fmt.Fprintf(w, "with one reader, plus %d B per further reader (the Redis source), a reader being one of a process's reader connections);\n", trackPerReader)
	fmt.Fprintln(w, "CPU from this shared 2-core machine (an upper bound)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| server | design | instances | msgs/write | msgs/s at the server | msgs/s per instance | bytes/s on the wire | server CPU (cores) | without writes: bytes/s, cores | server memory for the fleet's connections | tracking table |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|")
	for _, d := range m {
		for _, n := range a.sizes {
			msgs, bytes, cpu := d.perWrite(float64(n), a)
			track := "–"
			if d.near {
				track = size(trackingMemory(float64(n), a, d.trackItem))
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s/s | %.2f | %s/s, %.2f | %s | %s |\n", d.server, d.design, count(float64(n)), count(msgs),
				count(rate*msgs), count(rate*msgs/float64(n)), size(rate*bytes), rate*cpu,
				size(float64(n)*d.bgBytes), float64(n)*d.bgCPU, size(float64(n)*d.memPerProc), track)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Where each design hits a server limit (instances; the server's main thread is one core; %s msgs/s per core; a %.0f Gbit/s NIC)\n\n",
		count(a.opsPerCore), a.nicBytes*8/1e9)
	fmt.Fprintln(w, "The writes' own commands cost the same in every design (a: the claim, the loader's write, the waiters' reads); on this shared machine")
	fmt.Fprintln(w, "they measure far above a quiet server's few µs per command, so the CPU column is the core the fleet's messages (b·N + c·w) fill on top of them.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| server | design | rebuilds/s | cores for the writes themselves (a, measured) | messaging fills a core (measured cost) | msgs/s per core | NIC |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, d := range m {
		for _, r := range a.rates {
			get := func(k int) func(float64) float64 {
				return func(n float64) float64 {
					msgs, bytes, cpu := d.perWrite(n, a)
					return []float64{msgs, bytes, cpu}[k]
				}
			}
			cpu := get(2)
			messaging := func(n float64) float64 { return cpu(n) - cpu(0) }
			fmt.Fprintf(w, "| %s | %s | %s | %.2f | %s | %s | %s |\n", d.server, d.design, count(r), r*cpu(0),
				count(limit(messaging, r, 1)), count(limit(get(0), r, a.opsPerCore)), count(limit(get(1), r, a.nicBytes)))
		}
	}
}

// planeText writes p scaled by k as "a + b·N + c·w".
func planeText(p plane, k float64, f string) string {
	return fmt.Sprintf(f+" + "+f+"·N + "+f+"·w", p.a*k, p.b*k, p.c*k)
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
