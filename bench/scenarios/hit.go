package scenarios

import (
	"context"
	"fmt"
	"time"

	"github.com/hotkv/stampede/bench/report"
	"github.com/hotkv/stampede/cache"
	"github.com/vmihailenco/msgpack/v5"
)

// hitMode is one way of reading a fresh value.
type hitMode struct{ name, label string }

func hitModes() []hitMode {
	return []hitMode{
		{"stampede", "stampede GetOrLoad (fresh hit)"},
		{"raw", "raw GET + msgpack decode"},
	}
}

// hitGoroutines bounds the closed-loop readers per process: more only
// queue on the server and blur the latencies.
const hitGoroutines = 8

// storeHitItem stores the item the hit paths read: through a Cache of
// namespace ns as "item", and raw (msgpack) as ns:raw.
func storeHitItem(ctx context.Context, e *Env, ns string) error {
	c, err := cache.New(e.RDB, &cache.Options{Namespace: ns})
	if err != nil {
		return err
	}
	err = cache.Set(ctx, c, "item", newItem("item"), cache.WithExpiry(cache.Expiry{Fresh: time.Hour}))
	_ = c.Close()
	if err != nil {
		return fmt.Errorf("store the item: %w", err)
	}
	raw, err := msgpack.Marshal(newItem("item"))
	if err != nil {
		return err
	}
	if err := e.RDB.Set(ctx, ns+":raw", raw, time.Hour).Err(); err != nil {
		return fmt.Errorf("store the raw item: %w", err)
	}
	return nil
}

// Hit is the hit path: every process reads one fresh value in a closed
// loop, through GetOrLoad and, as the floor, with a plain GET and a
// msgpack decode of the same record.
func Hit(ctx context.Context, e *Env, r *report.Results) error {
	cfg := e.Cfg
	ns := e.key("hit")
	if err := storeHitItem(ctx, e, ns); err != nil {
		return err
	}
	g := min(cfg.Goroutines, hitGoroutines)
	for _, m := range hitModes() {
		e.Progress.Step("hit path · "+m.label, cfg.HitDuration)
		jobs := make([]job, cfg.Procs)
		for i := range jobs {
			jobs[i] = job{Kind: "hit", Approach: m.name, NS: ns, Key: "item", Goroutines: g, Duration: cfg.HitDuration}
		}
		res, _, err := e.Pods.Run(ctx, jobs, cfg.HitDuration+time.Minute)
		if err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
		mg := merge(res)
		r.Hit = append(r.Hit, report.Hit{Mode: m.label, Procs: cfg.Procs, Goroutines: g, Ops: mg.requests,
			Errors: mg.errors, FirstError: mg.firstErr, PerSec: float64(mg.requests) / cfg.HitDuration.Seconds(),
			Latency: summarize(mg.lat)})
	}
	return nil
}
