package scenarios

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/hotkv/stampede/bench/report"
	"github.com/hotkv/stampede/cache"
)

// Coherence measures how long after a write in one process another
// process stops serving the old value from its near cache. Two pods: the
// writer changes one key, the reader holds it in its near cache and reads
// it with cache.Get in a tight loop (then, in a second run, sleeping
// cohPace between reads), noting the instant each change first shows.
// Each cycle is four writes:
//
//  1. Set v1 (not measured: the reader saw a miss before, from the server);
//  2. Set v2, fresh for 2 ms only (measured: "Set");
//  3. once v2 is stale, GetOrLoad: it serves v2 and refreshes it in the
//     background, writing v3 (measured from the loader's return, so the
//     refresh's conditional write counts too: "refresh");
//  4. Delete (measured: "Delete").
//
// The writer starts each write only once the reader has acknowledged the
// previous change (an RPUSH on a list outside the namespace, which the
// writer BLPOPs), and, for the measured ones, served it from its near
// cache: so every measured write meets the old value in the reader's near
// cache. Both processes take time.Now on one host; the latency is the
// reader's first observation of the change less the instant the writer's
// call returned (for the refresh: its loader returned). An invalidation
// can overtake the writer's reply: such writes count as 0 and are shown
// as "early".
func Coherence(ctx context.Context, e *Env, r *report.Results) error {
	cfg := e.Cfg
	for _, pace := range []time.Duration{0, cohPace} {
		label := "tight loop"
		if pace > 0 {
			label = "paced reader"
		}
		e.Progress.Step(fmt.Sprintf("near cache coherence · %d writes · %s", 3*cfg.CoherenceCycles, label), time.Duration(cfg.CoherenceCycles)*12*time.Millisecond)
		if !e.NearWorks(ctx) {
			r.Coherence = &report.Coherence{Skipped: "the server does not track keys for clients"}
			e.noteNoNear(&r.Notes)
			continue
		}
		ns := e.key("coherence", strconv.Itoa(int(pace.Microseconds())))
		base := job{NS: ns, Key: "k", List: ns + "-acks", Cycles: cfg.CoherenceCycles, Pace: pace}
		writer, reader := base, base
		writer.Kind, reader.Kind = "coh-writer", "coh-reader"
		res, start, err := e.Pods.Run(ctx, []job{writer, reader}, time.Minute+time.Duration(cfg.CoherenceCycles)*200*time.Millisecond)
		if err != nil {
			return err
		}
		c, err := coherenceSummary(res[0].Writes, res[1].Marks)
		if err != nil {
			return err
		}
		c.Reads, c.NearHits, c.PaceUs = int64(res[1].Requests), res[1].NearHits, float64(pace)/1e3
		if last := res[1].Marks[len(res[1].Marks)-1].At; c.Reads > 0 && last > start.UnixNano() {
			c.ReadEveryUs = float64(last-start.UnixNano()) / float64(c.Reads) / 1e3
		}
		if pace == 0 {
			r.Coherence = c
		} else {
			r.CoherencePaced = c
		}
	}
	return nil
}

// cohPace is how long the paced reader sleeps between reads (time.Sleep:
// in practice about a millisecond). The tight loop never blocks, and a Go
// process whose only busy goroutine never blocks notices network input
// late (the server's invalidation arrives as promptly in both cases), so
// the paced reader shows what a process that does block sees.
const cohPace = 50 * time.Microsecond

// The reader's states: a value's ID, or one of these.
const (
	cohMiss = -1   // cache.ErrMiss
	cohStop = -100 // the writer's last value: stop reading
)

// cohWrite is one write of the coherence writer.
type cohWrite struct {
	Kind string // "set" (not measured), "Set", "refresh", "Delete"
	ID   int64  // the state it leads to: the value's ID, or cohMiss
	At   int64  // Unix ns: when the write returned (refresh: the loader)
}

// cohMark is a change the coherence reader saw.
type cohMark struct {
	State int64
	At    int64 // Unix ns: when the read that saw it returned
	Began int64 // Unix ns: when that read began
	// NearBefore: the read before it (of the previous state) came from
	// the near cache.
	NearBefore bool
}

// coherenceSummary pairs the writer's writes with the reader's marks (the
// first mark is the miss the reader starts with, the last its stop) and
// sums up the latencies by kind of write.
func coherenceSummary(writes []cohWrite, marks []cohMark) (*report.Coherence, error) {
	if len(marks) != len(writes)+2 || marks[0].State != cohMiss || marks[len(marks)-1].State != cohStop {
		return nil, fmt.Errorf("coherence: %d writes but the reader saw %d changes", len(writes), len(marks))
	}
	byKind, droppedBy := map[string][]int64{}, map[string][]int64{}
	rows := map[string]*report.CoherenceRow{}
	kinds := []string{"Set", "refresh", "Delete"}
	for _, k := range kinds {
		rows[k] = &report.CoherenceRow{Write: k}
	}
	all := &report.CoherenceRow{Write: "all"}
	var every, dropped []int64
	for i, w := range writes {
		m := marks[i+1]
		if m.State != w.ID {
			return nil, fmt.Errorf("coherence: write %d (%s) leads to %d, the reader saw %d", i, w.Kind, w.ID, m.State)
		}
		row := rows[w.Kind]
		if row == nil {
			continue // not measured
		}
		lat := m.At - w.At
		if lat < 0 {
			row.Early++
			all.Early++
			lat = 0
		}
		if m.NearBefore {
			row.NearBefore++
			all.NearBefore++
		}
		byKind[w.Kind] = append(byKind[w.Kind], lat)
		every = append(every, lat)
		d := max(0, min(m.Began, m.At)-w.At)
		droppedBy[w.Kind] = append(droppedBy[w.Kind], d)
		dropped = append(dropped, d)
	}
	out := &report.Coherence{Samples: map[string][]float64{}}
	for k, ns := range byKind {
		for _, v := range ns {
			out.Samples[k] = append(out.Samples[k], float64(v)/1e6)
		}
	}
	for _, k := range kinds {
		rows[k].Latency, rows[k].Dropped = dist(byKind[k]), dist(droppedBy[k])
		out.Rows = append(out.Rows, *rows[k])
	}
	all.Latency, all.Dropped = dist(every), dist(dropped)
	out.Rows = append(out.Rows, *all)
	return out, nil
}

// dist summarises nanoseconds, in milliseconds (nearest rank).
func dist(ns []int64) report.Dist {
	if len(ns) == 0 {
		return report.Dist{}
	}
	s := slices.Clone(ns)
	slices.Sort(s)
	q := func(p float64) float64 {
		i := int(p*float64(len(s))+0.999999) - 1
		return float64(s[max(0, min(len(s)-1, i))]) / 1e6
	}
	return report.Dist{N: len(s), P50: q(0.50), P90: q(0.90), P99: q(0.99), Max: float64(s[len(s)-1]) / 1e6}
}

func cohItem(id int64) Item { return Item{ID: id, Name: "coherence", Payload: make([]byte, 256)} }

func cohState(id int64) string {
	if id == cohMiss {
		return "miss"
	}
	return "v" + strconv.FormatInt(id, 10)
}

// runCohWriter is the writer's side of Coherence.
func runCohWriter(c *cache.Cache, acks func(ctx context.Context, want string) error, j job, start time.Time) (*podResult, error) {
	ctx := context.Background()
	time.Sleep(time.Until(start))
	res := &podResult{}
	if err := acks(ctx, cohState(cohMiss)); err != nil {
		return nil, fmt.Errorf("the reader did not start: %w", err)
	}
	now := func() int64 { return time.Now().UnixNano() }
	write := func(kind string, id int64, do func() error) error {
		if err := do(); err != nil {
			return fmt.Errorf("%s %d: %w", kind, id, err)
		}
		res.Writes = append(res.Writes, cohWrite{Kind: kind, ID: id, At: now()})
		res.Requests++
		if err := acks(ctx, cohState(id)); err != nil {
			return fmt.Errorf("%s %d: %w", kind, id, err)
		}
		return nil
	}
	const fresh = 2 * time.Millisecond
	for cyc := range int64(j.Cycles) {
		id := 3 * cyc
		if err := write("set", id, func() error { return cache.Set(ctx, c, j.Key, cohItem(id)) }); err != nil {
			return nil, err
		}
		var setAt time.Time
		if err := write("Set", id+1, func() error {
			err := cache.Set(ctx, c, j.Key, cohItem(id+1), cache.WithExpiry(cache.Expiry{Fresh: fresh, Stale: time.Hour}))
			setAt = time.Now()
			return err
		}); err != nil {
			return nil, err
		}
		// The refresh: once v' is stale, GetOrLoad serves it and rebuilds
		// it in the background.
		time.Sleep(time.Until(setAt.Add(fresh + time.Millisecond)))
		loaded := make(chan int64, 1)
		load := func(context.Context) (Item, error) {
			loaded <- now()
			return cohItem(id + 2), nil
		}
		it, err := cache.GetOrLoad(ctx, c, j.Key, load)
		switch {
		case err != nil:
			return nil, fmt.Errorf("refresh %d: %w", id+2, err)
		case it.ID != id+1:
			return nil, fmt.Errorf("refresh %d: GetOrLoad returned %d, want the stale %d", id+2, it.ID, id+1)
		}
		var at int64
		select {
		case at = <-loaded:
		case <-time.After(5 * time.Second):
			return nil, fmt.Errorf("refresh %d: the background refresh did not load", id+2)
		}
		res.Writes = append(res.Writes, cohWrite{Kind: "refresh", ID: id + 2, At: at})
		res.Requests++
		if err := acks(ctx, cohState(id+2)); err != nil {
			return nil, fmt.Errorf("refresh %d: %w", id+2, err)
		}
		if err := write("Delete", cohMiss, func() error { return c.Delete(ctx, j.Key) }); err != nil {
			return nil, err
		}
	}
	if err := cache.Set(ctx, c, j.Key, cohItem(cohStop)); err != nil {
		return nil, fmt.Errorf("stop: %w", err)
	}
	return res, nil
}

// runCohReader is the reader's side of Coherence: it reads the key in a
// tight loop (or sleeping j.Pace between reads) until it sees the stop value, noting each change and
// acknowledging it once it is served from the near cache (a miss at once:
// the near cache does not keep misses). near tells whether the last read
// came from the near cache.
func runCohReader(c *cache.Cache, near *atomic.Bool, ack func(ctx context.Context, state string) error, j job, start time.Time) (*podResult, error) {
	ctx := context.Background()
	deadline := start.Add(time.Minute + time.Duration(j.Cycles)*100*time.Millisecond).UnixNano()
	time.Sleep(time.Until(start))
	res := &podResult{}
	state, acked, prevNear := int64(-2), true, false
	for {
		t0 := time.Now().UnixNano()
		it, err := cache.Get[Item](ctx, c, j.Key)
		now := time.Now().UnixNano()
		res.Requests++
		var s int64
		switch {
		case err == nil || errors.Is(err, cache.ErrStale):
			s = it.ID
		case errors.Is(err, cache.ErrMiss):
			s = cohMiss
		default:
			res.Errors++
			if res.FirstErr == "" {
				res.FirstErr = err.Error()
			}
			if now > deadline {
				return nil, fmt.Errorf("reader: gave up: %w", err)
			}
			continue
		}
		n := near.Load()
		if s != state {
			res.Marks = append(res.Marks, cohMark{State: s, At: now, Began: t0, NearBefore: prevNear})
			state, acked = s, false
			if s == cohStop {
				return res, nil
			}
		}
		if !acked && (n || s == cohMiss) {
			if err := ack(ctx, cohState(s)); err != nil {
				return nil, fmt.Errorf("reader: acknowledge: %w", err)
			}
			acked = true
		}
		prevNear = n
		if j.Pace > 0 {
			time.Sleep(j.Pace)
		}
		if now > deadline {
			return nil, fmt.Errorf("reader: no stop after %d changes", len(res.Marks))
		}
	}
}
