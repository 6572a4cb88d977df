package report

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Label returns the name a reader sees for an approach.
func Label(approach string) string {
	switch approach {
	case "stampede":
		return "stampede GetOrLoad"
	case "naive":
		return "naive cache-aside"
	case "singleflight":
		return "singleflight per process"
	case "lock-poll":
		return "lock + 50 ms poll"
	case "stampede-broadcast":
		return "stampede GetOrLoad, Broadcast"
	case "stampede-near":
		return "stampede GetOrLoad + near cache"
	case "sturdyc":
		return "sturdyc per process"
	}
	return approach
}

// table is one scenario's results, rendered as text or Markdown.
type table struct {
	title, about string
	header       []string
	rows         [][]string
}

// tables builds the tables of every scenario that ran.
func tables(r *Results) []table {
	c := r.Config
	load := ms(c.LoadMs)
	var ts []table
	if len(r.Cold) > 0 {
		t := table{
			title: "Cold stampede",
			about: fmt.Sprintf("%d processes × %d goroutines ask for one absent key at once; the loader takes %s and counts its calls with INCR.",
				r.Cold[0].Procs, r.Cold[0].Goroutines, load),
			header: []string{"approach", "loader calls", "p50", "p99", "max", "errors"},
		}
		for _, x := range r.Cold {
			t.rows = append(t.rows, []string{Label(x.Approach), fmt.Sprint(x.LoaderCalls),
				ms(x.Latency.P50), ms(x.Latency.P99), ms(x.Latency.Max), errs(x.Errors, x.FirstError)})
		}
		ts = append(ts, t)
	}
	if len(r.Hot) > 0 {
		t := table{
			title: "Hot-key expiry",
			about: fmt.Sprintf("%.0f requests/s across %d processes on one key with TTL %s, for %s; the loader takes %s. "+
				"stampede runs with a stale time (Expiry.Stale), so an expired value is served while one process refreshes it. "+
				"\"waited\" counts requests slower than half the load time; \"after\" columns cover requests started within %s after each expiry's first load.",
				r.Hot[0].Rate, r.Hot[0].Procs, ms(c.TTLms), sec(c.DurationS), load, ms(r.Hot[0].WindowMs)),
			header: []string{"approach", "expiries", "loads/expiry", "max", "waited", "p50", "p99", "p99.9",
				"p50 after", "p99 after", "p99.9 after", "errors"},
		}
		near := false
		for _, x := range r.Hot {
			near = near || x.NearHits > 0
		}
		if near {
			t.about += " \"near\" is the share of requests the near cache answered."
			t.header = append(t.header[:5], append([]string{"near"}, t.header[5:]...)...)
		}
		for _, x := range r.Hot {
			row := []string{Label(x.Approach), fmt.Sprint(x.Expiries),
				fmt.Sprintf("%.2f", x.LoadsPerExpiry), fmt.Sprint(x.MaxLoadsPerExpiry),
				fmt.Sprintf("%d of %d", x.Waited, x.Requests)}
			if near {
				n := "-"
				if x.NearHits > 0 {
					n = share(x.NearHits, int64(x.Requests))
				}
				row = append(row, n)
			}
			t.rows = append(t.rows, append(row, ms(x.Overall.P50), ms(x.Overall.P99), ms(x.Overall.P999),
				ms(x.AfterExpiry.P50), ms(x.AfterExpiry.P99), ms(x.AfterExpiry.P999), errs(x.Errors, x.FirstError)))
		}
		ts = append(ts, t)
	}
	if len(r.Hit) > 0 {
		t := table{
			title: "Hit path",
			about: fmt.Sprintf("%d processes × %d goroutines read one fresh value in a closed loop.",
				r.Hit[0].Procs, r.Hit[0].Goroutines),
			header: []string{"mode", "ops/s", "p50", "p99", "p99.9", "errors"},
		}
		for _, x := range r.Hit {
			t.rows = append(t.rows, []string{x.Mode, fmt.Sprintf("%.0f", x.PerSec),
				ms(x.Latency.P50), ms(x.Latency.P99), ms(x.Latency.P999), errs(x.Errors, x.FirstError)})
		}
		ts = append(ts, t)
	}
	if len(r.Lock) > 0 {
		t := table{
			title:  "Lock",
			about:  "Obtain + Release cycles on distinct keys, one release strategy forced at a time (internal/redisx.Forced).",
			header: []string{"release strategy", "goroutines", "cycles/s", "p50", "p99", "errors / note"},
		}
		for _, x := range r.Lock {
			if x.Skipped != "" {
				t.rows = append(t.rows, []string{x.Strategy, "-", "-", "-", "-", "skipped: " + x.Skipped})
				continue
			}
			t.rows = append(t.rows, []string{x.Strategy, fmt.Sprint(x.Goroutines), fmt.Sprintf("%.0f", x.PerSec),
				ms(x.Latency.P50), ms(x.Latency.P99), errs(x.Errors, x.FirstError)})
		}
		ts = append(ts, t)
	}
	if len(r.Large) > 0 {
		t := table{
			title: "Large values",
			about: "Compare-and-delete of a stored value: bytes the client sent per operation and its time, " +
				"including hashing on the client.",
			header: []string{"size", "method", "bytes sent", "p50", "p99", "errors / note"},
		}
		for _, x := range r.Large {
			if x.Skipped != "" {
				t.rows = append(t.rows, []string{size(x.Size), x.Method, "-", "-", "-", "skipped: " + x.Skipped})
				continue
			}
			t.rows = append(t.rows, []string{size(x.Size), x.Method, fmt.Sprintf("%.0f", x.BytesSent),
				ms(x.Latency.P50), ms(x.Latency.P99), errs(x.Errors, x.FirstError)})
		}
		ts = append(ts, t)
	}
	if len(r.ScaleProcs) > 0 {
		ts = append(ts, scaleTable("Scaling with processes",
			fmt.Sprintf("Cold stampede on one key, %d goroutines per process, loader %s. Cells: loader calls · p99.",
				r.ScaleProcs[0].Requests/max(1, r.ScaleProcs[0].Procs), load), "processes", r.ScaleProcs))
	}
	if len(r.ScaleKeys) > 0 {
		ts = append(ts, scaleTable("Scaling with distinct keys",
			fmt.Sprintf("Cold stampede over N absent keys at once from %d processes (every process asks for every key), loader %s. "+
				"Cells: loader calls (ideal: N) · p99.", r.ScaleKeys[0].Procs, ms(c.ScaleLoadMs)), "keys", r.ScaleKeys))
	}
	ts = append(ts, gapTables(r)...)
	ts = append(ts, nearTables(r)...)
	ts = append(ts, purgeTables(r)...)
	ts = append(ts, backendTables(r)...)
	return append(ts, batchTables(r)...)
}

func scaleTable(title, about, axis string, pts []Scale) table {
	var approaches []string
	var xs []int
	cell := map[string]map[int]Scale{}
	for _, p := range pts {
		if cell[p.Approach] == nil {
			cell[p.Approach] = map[int]Scale{}
			approaches = append(approaches, p.Approach)
		}
		if !slices.Contains(xs, p.X) {
			xs = append(xs, p.X)
		}
		cell[p.Approach][p.X] = p
	}
	t := table{title: title, about: about, header: []string{axis}}
	for _, a := range approaches {
		t.header = append(t.header, Label(a))
	}
	for _, x := range xs {
		row := []string{fmt.Sprint(x)}
		for _, a := range approaches {
			p, ok := cell[a][x]
			switch {
			case !ok:
				row = append(row, "")
			case p.Errors > 0:
				row = append(row, fmt.Sprintf("%d · %s · %d errors", p.LoaderCalls, ms(p.Latency.P99), p.Errors))
			default:
				row = append(row, fmt.Sprintf("%d · %s", p.LoaderCalls, ms(p.Latency.P99)))
			}
		}
		t.rows = append(t.rows, row)
	}
	return t
}

// WriteText prints every table, aligned, for a terminal.
func WriteText(w io.Writer, r *Results) error {
	fmt.Fprintf(w, "stampede bench · %s · %s · %d CPUs · %.1fs\n", r.Server.Capabilities, r.Server.Kind, r.Machine.CPUs, r.ElapsedS)
	if r.Command != "" {
		fmt.Fprintf(w, "command: %s\n", r.Command)
	}
	if r.Machine.Load != "" {
		fmt.Fprintf(w, "load average %s\n", r.Machine.Load)
	}
	for _, t := range tables(r) {
		fmt.Fprintf(w, "\n%s\n%s\n\n", t.title, wrap(t.about, 100))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, strings.Join(t.header, "\t"))
		for _, row := range t.rows {
			fmt.Fprintln(tw, strings.Join(row, "\t"))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "\nnote: %s", n)
	}
	_, err := fmt.Fprintln(w)
	return err
}

func wrap(s string, width int) string {
	var b strings.Builder
	n := 0
	for i, word := range strings.Fields(s) {
		if i > 0 && n+1+len(word) > width {
			b.WriteByte('\n')
			n = 0
		} else if i > 0 {
			b.WriteByte(' ')
			n++
		}
		b.WriteString(word)
		n += len(word)
	}
	return b.String()
}

// ms formats milliseconds with about three significant digits.
func ms(v float64) string {
	switch {
	case v <= 0:
		return "0"
	case v < 1:
		return fmt.Sprintf("%.0f µs", v*1000)
	case v < 10:
		return fmt.Sprintf("%.2f ms", v)
	case v < 100:
		return fmt.Sprintf("%.1f ms", v)
	case v < 10000:
		return fmt.Sprintf("%.0f ms", v)
	}
	return fmt.Sprintf("%.1f s", v/1000)
}

func sec(s float64) string { return time.Duration(s * float64(time.Second)).String() }

func size(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

func errs(n int, first string) string {
	if n == 0 {
		return "0"
	}
	if len(first) > 60 {
		first = first[:60] + "…"
	}
	return fmt.Sprintf("%d (%s)", n, first)
}
