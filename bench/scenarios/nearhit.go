package scenarios

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hotkv/stampede/bench/report"
)

// nearHitModes are the ways the near-cache hit path reads one hot key.
func nearHitModes() []hitMode {
	return []hitMode{
		{"raw", "raw GET + msgpack decode"},
		{"stampede", "stampede GetOrLoad"},
		{nearApproach, "stampede GetOrLoad + near cache"},
		{"otter", "otter Get, in-process only (not coherent)"},
	}
}

// nearHitGoroutines is how many goroutines of one process read the hot
// key (issue 12's setting).
const nearHitGoroutines = 32

// NearHitPath is the hit path of one process: 32 goroutines read one
// fresh key (a 256-byte payload) in a closed loop, with a raw GET and
// msgpack decode, through GetOrLoad, and through GetOrLoad with the near
// cache; throughput as ratios to the raw GET of the same run.
func NearHitPath(ctx context.Context, e *Env, r *report.Results) error {
	cfg := e.Cfg
	ns := e.key("near-hit")
	if err := storeHitItem(ctx, e, ns); err != nil {
		return err
	}
	var raw float64
	for _, m := range nearHitModes() {
		if m.name == nearApproach && !e.NearWorks(ctx) {
			e.Progress.Step("near hit path · "+m.label+": skipped", 0)
			e.noteNoNear(&r.Notes)
			continue
		}
		e.Progress.Step("near hit path · "+m.label, cfg.HitDuration)
		j := job{Kind: "hit", Approach: m.name, NS: ns, Key: "item", Goroutines: nearHitGoroutines,
			Duration: cfg.HitDuration, Throughput: true}
		res, _, err := e.Pods.Run(ctx, []job{j}, cfg.HitDuration+time.Minute)
		if err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
		x := res[0]
		h := report.NearHit{Mode: m.name, Label: m.label, Goroutines: nearHitGoroutines, ValueBytes: len(newItem("").Payload),
			Ops: x.Requests, Errors: x.Errors, FirstError: x.FirstErr, NearHits: x.NearHits, Latency: summarize(x.Lat)}
		if x.Elapsed > 0 {
			h.PerSec = float64(x.Requests) / time.Duration(x.Elapsed).Seconds()
		}
		if m.name == "raw" {
			raw = h.PerSec
		}
		if raw > 0 {
			h.VsRaw = h.PerSec / raw
		}
		r.NearHit = append(r.NearHit, h)
	}
	return nil
}

// runThroughput reads one fresh key in a closed loop from every
// goroutine, as fast as it can: it looks at the clock once every 256
// requests and times those requests only, so that timing does not weigh
// on requests that take a few hundred nanoseconds.
func runThroughput(j job, g getter, start time.Time) *podResult {
	load := func(context.Context) (Item, error) { return Item{}, errHitLoaded }
	end := start.Add(j.Duration)
	time.Sleep(time.Until(start))
	t0 := time.Now()
	var (
		mu  sync.Mutex // guards res
		res = &podResult{}
		wg  sync.WaitGroup
	)
	for range j.Goroutines {
		wg.Go(func() {
			var mine podResult
			ctx := context.Background()
			for i := 0; ; i++ {
				timed := i&255 == 0
				var t time.Time
				if timed {
					t = time.Now()
					if !t.Before(end) {
						break
					}
				}
				it, err := g.get(ctx, j.Key, load)
				if err == nil && it.ID != 42 {
					err = fmt.Errorf("read a wrong item %+v", it)
				}
				if timed {
					mine.record(0, time.Since(t), err, false)
				} else {
					mine.count(err)
				}
			}
			mu.Lock()
			res.merge(&mine)
			mu.Unlock()
		})
	}
	wg.Wait()
	res.Elapsed = int64(time.Since(t0))
	return res
}
