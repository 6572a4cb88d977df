package report

import (
	"fmt"
	"math"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// NearHit is one way of reading one hot key from one process.
type NearHit struct {
	Mode       string  `json:"mode"`
	Label      string  `json:"label"`
	Goroutines int     `json:"goroutines"`
	ValueBytes int     `json:"value_bytes"`
	Ops        int     `json:"ops"`
	Errors     int     `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	PerSec     float64 `json:"ops_per_s"`
	// VsRaw is PerSec over the raw GET's PerSec in the same run.
	VsRaw    float64 `json:"vs_raw_get"`
	NearHits int64   `json:"near_hits"`
	Latency  Latency `json:"latency"`
}

// Dist summarises a distribution, in milliseconds.
type Dist struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50_ms"`
	P90 float64 `json:"p90_ms"`
	P99 float64 `json:"p99_ms"`
	Max float64 `json:"max_ms"`
}

// Coherence is the time from a write in one process to another process
// no longer serving the old value from its near cache.
type Coherence struct {
	// Skipped says why the scenario did not run.
	Skipped string `json:"skipped,omitempty"`
	// Reads and NearHits are the reader's: how often it read, and how
	// many reads its near cache answered.
	Reads    int64 `json:"reads"`
	NearHits int64 `json:"near_hits"`
	// PaceUs is how long the reader slept between reads (0: a tight
	// loop); ReadEveryUs the mean time from one read to the next.
	PaceUs      float64 `json:"pace_us"`
	ReadEveryUs float64 `json:"read_every_us"`
	// Rows: one per kind of write ("Set", "refresh", "Delete"), then
	// "all".
	Rows []CoherenceRow `json:"rows,omitempty"`
	// Samples holds every latency (ms) by kind of write, for the plot.
	Samples map[string][]float64 `json:"-"`
}

// CoherenceRow is the coherence latency of one kind of write.
type CoherenceRow struct {
	Write string `json:"write"`
	// NearBefore counts writes before which the reader's last read of the
	// old value came from its near cache (the case measured): all of
	// them, unless something flushed it.
	NearBefore int `json:"near_before"`
	// Early counts writes the reader saw before the writer's call
	// returned (the invalidation overtook the reply); they count as 0.
	Early   int  `json:"early"`
	Latency Dist `json:"latency"`
	// Dropped is the time to the start of the reader's read that found
	// the change: by then its near cache had dropped the old value, and
	// the read went to the server.
	Dropped Dist `json:"dropped"`
}

// NearMemory is the near cache's heap cost and its bound under a flood
// of distinct keys.
type NearMemory struct {
	Skipped string `json:"skipped,omitempty"`
	// ValueBytes is the size of each value ([]byte, before encoding).
	ValueBytes int `json:"value_bytes"`

	// Entries were read once into a near cache large enough for all of
	// them (MaxEntries Entries + 10%); Present of them were found there
	// on a second pass. HeapFilled is the heap they take (after GC, less
	// the heap before), HeapDecoded the same once every entry was hit and
	// kept its decoded value.
	Entries     int   `json:"entries"`
	Present     int64 `json:"present"`
	HeapFilled  int64 `json:"heap_filled_bytes"`
	HeapDecoded int64 `json:"heap_decoded_bytes"`

	// FloodKeys distinct keys were read once each through a near cache of
	// MaxEntries FloodMax. FloodPeak is the highest heap seen while
	// reading (garbage included), FloodAfter the heap after GC at the
	// end (both less the heap before); FloodPresent counts the near hits
	// of a second pass over the last FloodSample keys read.
	FloodKeys     int     `json:"flood_keys"`
	FloodMax      int     `json:"flood_max_entries"`
	FloodPeak     int64   `json:"flood_peak_heap_bytes"`
	FloodAfter    int64   `json:"flood_after_heap_bytes"`
	FloodPresent  int64   `json:"flood_present"`
	FloodSample   int     `json:"flood_sample"`
	FloodSeconds  float64 `json:"flood_s"`
	FloodNearHits int64   `json:"flood_near_hits"`
}

// nearTables builds the tables of the near-cache scenarios that ran.
func nearTables(r *Results) []table {
	var ts []table
	if len(r.NearHit) > 0 {
		x0 := r.NearHit[0]
		t := table{
			title: "Near cache: hit path",
			about: fmt.Sprintf("One process, %d goroutines read one fresh key (a %d-byte payload, msgpack) in a closed loop. "+
				"\"× raw\" is the throughput over the raw GET's in this run. The clock is read once every 256 requests, "+
				"and only those are timed.", x0.Goroutines, x0.ValueBytes),
			header: []string{"mode", "ops/s", "× raw GET", "near hits", "p50", "p99", "errors"},
		}
		for _, x := range r.NearHit {
			t.rows = append(t.rows, []string{x.Label, fmt.Sprintf("%.0f", x.PerSec), fmt.Sprintf("%.2f", x.VsRaw),
				share(x.NearHits, int64(x.Ops)), usMs(x.Latency.P50), usMs(x.Latency.P99), errs(x.Errors, x.FirstError)})
		}
		ts = append(ts, t)
	}
	if c := r.Coherence; c != nil {
		readers := []*Coherence{c}
		if r.CoherencePaced != nil && r.CoherencePaced.Skipped == "" {
			readers = append(readers, r.CoherencePaced)
		}
		t := table{
			title: "Near cache: coherence across processes",
			about: "Process A writes one key; process B holds it in its near cache and reads it in a tight loop (cache.Get). " +
				"Latency: from A's call returning (for the refresh, from its loader returning, so the refresh's write counts) " +
				"to B's first read that no longer returns the old value; both take time.Now on one host. " +
				"A writes again only once B has served the new state from its near cache. " +
				"\"dropped\": to the start of B's read that found the change, by when B's near cache had let the old value go " +
				"(the rest is that read's round trip to the server). " +
				"\"early\": B saw the change before A's call returned (counted as 0); " +
				"\"near before\": B's last read of the old value came from its near cache. " +
				"B reads in a tight loop, or (\"paced\") sleeping between reads: a Go process whose only busy goroutine " +
				"never blocks notices network input late, up to the runtime's 10 ms polls, so the tight loop's tail is " +
				"mostly B's own; the paced reader's latencies include up to one pause between reads.",
			header: []string{"reader", "write", "writes", "p50", "p90", "p99", "max", "dropped p50", "dropped p99", "early", "near before"},
		}
		if c.Skipped != "" {
			t.rows = append(t.rows, []string{"skipped: " + c.Skipped, "", "", "", "", "", "", "", "", "", ""})
		}
		for _, rd := range readers {
			name := "tight loop"
			if rd.PaceUs > 0 {
				name = fmt.Sprintf("paced (sleep %.0f µs)", rd.PaceUs)
			}
			if rd.Reads > 0 {
				every := usMs(rd.ReadEveryUs / 1000)
				if rd.ReadEveryUs < 10 {
					every = fmt.Sprintf("%.2f µs", rd.ReadEveryUs)
				}
				name += fmt.Sprintf(": a read every %s, %s near", every, share(rd.NearHits, rd.Reads))
			}
			for _, x := range rd.Rows {
				t.rows = append(t.rows, []string{name, x.Write, fmt.Sprint(x.Latency.N), ms(x.Latency.P50), ms(x.Latency.P90),
					ms(x.Latency.P99), ms(x.Latency.Max), ms(x.Dropped.P50), ms(x.Dropped.P99),
					fmt.Sprint(x.Early), fmt.Sprintf("%d of %d", x.NearBefore, x.Latency.N)})
			}
		}
		ts = append(ts, t)
	}
	if m := r.NearMemory; m != nil {
		t := table{
			title: "Near cache: memory",
			about: fmt.Sprintf("Heap (runtime.ReadMemStats after GC, less the heap before) of a process whose near cache holds "+
				"values of %d bytes ([]byte, msgpack), then a flood of distinct keys, each read once, through a near cache "+
				"with a smaller MaxEntries.", m.ValueBytes),
			header: []string{"measure", "value"},
		}
		if m.Skipped != "" {
			t.rows = append(t.rows, []string{"skipped", m.Skipped})
		} else {
			per := float64(m.HeapFilled) / float64(max(1, m.Entries))
			t.rows = append(t.rows,
				[]string{fmt.Sprintf("heap, %s entries read once", count(m.Entries)), fmt.Sprintf("%s (%.0f B per entry)", mib(m.HeapFilled), per)},
				[]string{"heap, each entry also hit once (decoded value kept)", fmt.Sprintf("%s (%.0f B per entry)", mib(m.HeapDecoded), float64(m.HeapDecoded)/float64(max(1, m.Entries)))},
				[]string{"entries found again on a second pass", fmt.Sprintf("%d of %d", m.Present, m.Entries)},
				[]string{"flood: distinct keys read, MaxEntries", fmt.Sprintf("%s keys, %s (%.1f s, %.0f reads/s)", count(m.FloodKeys), count(m.FloodMax), m.FloodSeconds, float64(m.FloodKeys)/max(m.FloodSeconds, 1e-9))},
				[]string{"flood: peak heap while reading (garbage included)", mib(m.FloodPeak)},
				[]string{"flood: heap after GC", fmt.Sprintf("%s (≈ %s entries at %.0f B each)", mib(m.FloodAfter), count(int(float64(m.FloodAfter)/max(per, 1))), per)},
				[]string{fmt.Sprintf("flood: near hits re-reading the last %s keys", count(m.FloodSample)), fmt.Sprint(m.FloodPresent)},
			)
		}
		ts = append(ts, t)
	}
	return ts
}

// usMs is ms for latencies timed in whole microseconds: 0 means less than
// one.
func usMs(v float64) string {
	if v <= 0 {
		return "< 1 µs"
	}
	return ms(v)
}

func share(n, of int64) string {
	if of <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(n)/float64(of))
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// count writes n with thin spaces between thousands.
func count(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + " " + s[i:]
	}
	return s
}

// coherencePlot draws the distribution of the coherence latencies by kind
// of write: the share of writes seen by the other process within x ms.
func coherencePlot(path string, c, paced *Coherence) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("near cache coherence across processes (%d writes per reader; dashed: paced reader)", c.Rows[len(c.Rows)-1].Latency.N)
	p.X.Label.Text = "ms from the write returning to the other process no longer serving the old value"
	p.Y.Label.Text = "share of writes"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	readers := []*Coherence{c}
	if paced != nil && len(paced.Samples) > 0 {
		readers = append(readers, paced)
	}
	lo, hi := math.Inf(1), 0.0
	for _, rd := range readers {
		for _, ms := range rd.Samples {
			for _, v := range ms {
				lo, hi = min(lo, v), max(hi, v)
			}
		}
	}
	lo = math.Pow(10, math.Floor(math.Log10(max(lo, 0.01))))
	p.X.Min, p.X.Max = lo, math.Pow(10, math.Ceil(math.Log10(max(hi, 2*lo))))
	p.Y.Min, p.Y.Max = 0, 1
	p.Legend.Top, p.Legend.Left = true, true
	for ri, rd := range readers {
		for i, k := range []string{"Set", "refresh", "Delete"} {
			s := slices.Clone(rd.Samples[k])
			if len(s) == 0 {
				continue
			}
			slices.Sort(s)
			xys := make(plotter.XYs, len(s))
			for j, v := range s {
				xys[j] = plotter.XY{X: max(v, lo), Y: float64(j+1) / float64(len(s))}
			}
			l, err := plotter.NewLine(xys)
			if err != nil {
				return err
			}
			l.Color = plotutil.Color(i)
			l.Width = vg.Points(1.5)
			if ri > 0 {
				l.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
			} else {
				p.Legend.Add(k, l)
			}
			p.Add(l)
		}
	}
	target, err := plotter.NewLine(plotter.XYs{{X: 2, Y: 0}, {X: 2, Y: 1}})
	if err != nil {
		return err
	}
	target.Color = loadColor()
	target.Dashes = []vg.Length{vg.Points(3), vg.Points(2)}
	p.Add(target)
	p.Legend.Add("2 ms", target)
	return save(path, [][]*plot.Plot{{p}}, 20*vg.Centimeter, 11*vg.Centimeter)
}
