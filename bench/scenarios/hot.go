package scenarios

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/hotkv/stampede/bench/report"
)

// Hot is the hot-key expiry: Rate requests per second, spread over Procs
// processes, ask for one key with TTL; the key is loaded before the start,
// so every load during the run follows an expiry. stampede runs with a
// Expiry.Stale of 10 × TTL; the baselines have no such thing.
//
// Loads are logged on the server with their start times. Loads less than
// TTL/2 apart belong to one expiry (after a load, the value lives at least
// TTL, so two expiries are at least TTL apart, given TTL > 2 × Load).
func Hot(ctx context.Context, e *Env, r *report.Results) error {
	c := e.Cfg
	window := max(2*c.Load, 50*time.Millisecond)
	perPod := c.Rate / float64(c.Procs)
	interval := time.Duration(float64(time.Second) / perPod)
	approaches := cacheApproaches(ctx, e, &r.Notes)
	if len(approaches) == len(Approaches()) {
		e.Progress.Step("hot-key expiry · "+report.Label(nearApproach)+": skipped", 0)
	}
	for _, a := range approaches {
		e.Progress.Step(fmt.Sprintf("hot-key expiry · %s", report.Label(a)), c.Duration)
		ns := e.key("hot", a)
		list := ns + ":loadlog"
		jobs := make([]job, c.Procs)
		for i := range jobs {
			jobs[i] = job{Kind: "hot", Approach: a, NS: ns, Key: "hot", List: list, Rate: perPod,
				PhaseShift: interval * time.Duration(i) / time.Duration(c.Procs), Duration: c.Duration,
				Warm: i == 0, Load: c.Load, TTL: c.TTL, Stale: 10 * c.TTL}
		}
		res, start, err := e.Pods.Run(ctx, jobs, c.Duration+2*time.Minute)
		if err != nil {
			return fmt.Errorf("%s: %w", a, err)
		}
		logged, err := e.RDB.LRange(ctx, list, 0, -1).Result()
		if err != nil {
			return fmt.Errorf("%s: read the load log: %w", a, err)
		}
		if err := e.RDB.Del(ctx, list).Err(); err != nil {
			return err
		}
		var loads []float64 // seconds since start; the warm-up load came before it
		for _, s := range logged {
			ns, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return fmt.Errorf("%s: load log entry %q: %w", a, s, err)
			}
			if at := time.Unix(0, ns).Sub(start); at >= 0 {
				loads = append(loads, at.Seconds())
			}
		}
		slices.Sort(loads)
		h, series := hotSummary(a, res, loads, c, window)
		r.Hot = append(r.Hot, h)
		r.HotSeries = append(r.HotSeries, series)
	}
	return nil
}

// hotSummary turns one run's requests and load starts into its results.
func hotSummary(approach string, res []podResult, loads []float64, c Config, window time.Duration) (report.Hot, report.HotSeries) {
	h := report.Hot{Approach: approach, Procs: c.Procs, Rate: c.Rate, Loads: len(loads), WindowMs: millis(window)}
	series := report.HotSeries{Approach: approach, Loads: loads}

	// Group loads into expiries.
	var counts []int
	for i, at := range loads {
		if i == 0 || at-loads[i-1] > c.TTL.Seconds()/2 {
			series.Expiries = append(series.Expiries, at)
			counts = append(counts, 0)
		}
		counts[len(counts)-1]++
	}
	h.Expiries = len(counts)
	if h.Expiries > 0 {
		h.LoadsPerExpiry = float64(h.Loads) / float64(h.Expiries)
		h.MaxLoadsPerExpiry = slices.Max(counts)
	}

	var all, after []int64
	for _, r := range res {
		h.Requests += r.Requests
		h.Errors += r.Errors
		h.NearHits += r.NearHits
		if h.FirstError == "" {
			h.FirstError = r.FirstErr
		}
		for i, lat := range r.Lat {
			at := float64(r.At[i]) / 1e6
			all = append(all, lat)
			series.At = append(series.At, at)
			series.LatMs = append(series.LatMs, float64(lat)/1000)
			if lat > c.Load.Microseconds()/2 {
				h.Waited++
			}
			for _, e := range series.Expiries {
				if at >= e && at-e < window.Seconds() {
					after = append(after, lat)
					break
				}
			}
		}
	}
	h.Overall, h.AfterExpiry = summarize(all), summarize(after)
	return h, series
}
