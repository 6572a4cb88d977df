package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"
)

// config is what one run measures.
type config struct {
	procs    []int         // fleet sizes, ascending
	writes   int           // idle phase: writes by the one writer
	rate     int           // idle phase: writes per second
	keys     int           // idle phase: K, keys the writes go round
	rounds   int           // wait phase: rebuilds, each with its waiters
	waiters  int           // wait phase: processes waiting for each rebuilt key (at most N-1)
	load     time.Duration // wait phase: the rebuild's loader time
	quiet    time.Duration // quiet phase: how long the fleet is measured without writes (0: no quiet phase)
	value    int           // bytes of each value
	designs  []string
	near     bool    // also measure the last design with the near cache on in every process
	holdFrac float64 // with near: fraction of the processes holding each key in their near cache
	cluster  bool
	tag      *tagConfig // -tags: the tag measurement instead of the designs
}

// point is one measured fleet size, design and phase.
type point struct {
	Server  string // "redis" or "cluster"
	Design  string // a design; "+near" when every process has the near cache on
	Phase   string // "idle": one writer, the others neither hold nor wait; "wait": rebuilds with waiters; "quiet": no writes
	N       int    // processes, the writer included
	Writes  int
	Elapsed time.Duration
	Waiters int // wait phase: waiting processes per rebuild

	Delta       counts  // what the N processes read, summed
	ServerBytes int64   // INFO total_net_output_bytes delta, less the controller's INFO replies
	CPU         float64 // used_cpu_sys + used_cpu_user delta, seconds
	MemPerProc  float64 // server used_memory per open process (its Cache's connections, subscriptions, tracking)
	Holders     int     // with near: processes holding each written key before the writes
	TrackItems  int64   // with near: the server's tracking table once they hold them, (client, key) pairs
	TrackPrefix int64   // with near: BCAST prefixes registered
	TrackMem    float64 // with near: the server's memory per tracking item (see hold)
	BusPublish  int64   // Cluster: PUBLISH/SPUBLISH messages sent over the cluster bus
	MaxProcMsgs int64   // messages the busiest process got
	Wake        []time.Duration
	NotWaited   int // wait phase: waiters that found the value already written
	Errors      int
	FirstErr    string
}

// Per write, as the tables print them.
func (p *point) perWrite(v float64) float64 { return v / float64(max(1, p.Writes)) }

// msgs is every pub/sub message the fleet received.
func (p *point) msgs() int64 { return p.Delta.Messages + p.Delta.SMessages }

// writerReplies is what the server sent the processes' command
// connections (those that never subscribed): in the idle phase the
// replies to the writer's own writes (the others send nothing but the
// near cache's reads, if on); in the wait phase the rebuilder's and the
// waiters' own reads as well.
func (p *point) writerReplies() int64 { return p.Delta.CmdBytes }

// delivered is the server's bytes out less the writers' own replies:
// what the announcements (and tracking invalidations) cost on the wire.
func (p *point) delivered() int64 { return p.ServerBytes - p.writerReplies() }

// runPoint measures n processes with design: the idle phase, then the
// wait phase, each a point.
func (ct *controller) runPoint(ctx context.Context, design string, near bool, n int) ([]point, error) {
	ws := make([]int, n)
	for i := range ws {
		ws[i] = i
	}
	ct.ns++
	ns := fmt.Sprintf("fleet%d", ct.ns)
	m0, err := info(ctx, ct.nodes)
	if err != nil {
		return nil, err
	}
	nearArg, name := "0", design
	if near {
		nearArg, name = "1", design+"+near"
	}
	if _, err := ct.ask(ctx, ws, fmt.Sprintf("open %s %s %s %d", design, nearArg, ns, ct.cfg.value)); err != nil {
		return nil, fmt.Errorf("open: %w", err)
	}
	defer func() { _, _ = ct.ask(context.WithoutCancel(ctx), ws, "close") }()
	m1, err := info(ctx, ct.nodes)
	if err != nil {
		return nil, err
	}
	srvName := "redis"
	if ct.cfg.cluster {
		srvName = "cluster"
	}
	memPer := float64(m1.memory-m0.memory) / float64(n)

	idle := point{Server: srvName, Design: name, Phase: "idle", N: n, Writes: ct.cfg.writes, MemPerProc: memPer}
	if _, err := ct.ask(ctx, []int{0}, fmt.Sprintf("prefill k %d", ct.cfg.keys)); err != nil {
		return nil, fmt.Errorf("prefill: %w", err)
	}
	if near {
		if err := ct.hold(ctx, &idle, n, m1); err != nil {
			return nil, err
		}
	}
	err = ct.measure(ctx, &idle, ws, func() error {
		lines, err := ct.ask(ctx, []int{0}, fmt.Sprintf("writes %d %d %d", ct.cfg.writes, ct.cfg.rate, ct.cfg.keys))
		if err != nil {
			return err
		}
		var ns int64
		var first string
		if _, err := fmt.Sscanf(lines[0], "done %d %d %q", &ns, &idle.Errors, &first); err != nil {
			return fmt.Errorf("writer said %q: %w", lines[0], err)
		}
		idle.Elapsed, idle.FirstErr = time.Duration(ns), first
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("idle phase: %w", err)
	}
	out := []point{idle}
	if ct.cfg.quiet > 0 {
		// No writes at all: what the fleet costs the server by itself
		// (pings, the near cache's watch of a Cluster's nodes).
		quiet := point{Server: srvName, Design: name, Phase: "quiet", N: n, MemPerProc: memPer}
		err = ct.measure(ctx, &quiet, ws, func() error {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(ct.cfg.quiet):
				return nil
			}
		})
		if err != nil {
			return nil, fmt.Errorf("quiet phase: %w", err)
		}
		out = append(out, quiet)
	}
	if near || ct.cfg.rounds == 0 {
		return out, nil // the near cache changes nothing for waiters
	}

	nw := 0
	if n > 1 {
		nw = min(n-1, ct.cfg.waiters)
	}
	wait := point{Server: srvName, Design: name, Phase: "wait", N: n, Writes: ct.cfg.rounds, Waiters: nw, MemPerProc: memPer}
	// Warm for waiting too: every process waits once before the
	// measurement (a process's first wait may open a connection).
	if n > 1 {
		var warm point
		if err := ct.round(ctx, &warm, "warm-wait", 0, n-1, n); err != nil {
			return nil, fmt.Errorf("warm-up wait: %w", err)
		}
	}
	err = ct.measure(ctx, &wait, ws, func() error {
		for r := range ct.cfg.rounds {
			if err := ct.round(ctx, &wait, fmt.Sprintf("w%d", r), r%n, nw, n); err != nil {
				return fmt.Errorf("round %d: %w", r, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("wait phase: %w", err)
	}
	return append(out, wait), nil
}

// holdItems is how many tracking items the second pass of hold adds,
// to measure the tracking table's memory per item: enough that the
// server's other allocations coming and going are noise.
const holdItems = 20_000

// hold has a share of the n processes read each written key into their
// near caches (before is the server's state until then). With one process
// it then reads holdItems other keys: the server's memory growth in that
// second pass, whose reads find every connection made, over the tracking
// items it adds is the table's cost per item.
func (ct *controller) hold(ctx context.Context, p *point, n int, before nodeStats) error {
	p.Holders = min(n, max(1, int(math.Round(ct.cfg.holdFrac*float64(n)))))
	holdKeys := (holdItems + p.Holders - 1) / p.Holders
	if _, err := ct.ask(ctx, []int{0}, fmt.Sprintf("prefill x %d", holdKeys)); err != nil {
		return fmt.Errorf("prefill: %w", err)
	}
	read := func(prefix string, keys int) (nodeStats, error) {
		for i := range n {
			if err := ct.f.Send(i, fmt.Sprintf("hold %s %d %d %d %d", prefix, keys, p.Holders, n, i)); err != nil {
				return nodeStats{}, err
			}
		}
		if _, err := ct.collect(ctx, n); err != nil {
			return nodeStats{}, fmt.Errorf("hold: %w", err)
		}
		return info(ctx, ct.nodes)
	}
	a, err := read("k", ct.cfg.keys)
	if err != nil {
		return err
	}
	// Items of processes closed before may linger: the server drops a
	// key's items when the key is next written.
	p.TrackItems, p.TrackPrefix = a.trackItems-before.trackItems, a.trackPrefixes
	if n > 1 {
		// With more processes the server's other allocations (their
		// connections' state) move by more than the table grows: the
		// memory per item is measured with one process only.
		return nil
	}
	b, err := read("x", holdKeys)
	if err != nil {
		return err
	}
	if d := b.trackItems - a.trackItems; d > 0 {
		// Client buffers grow and shrink with traffic: left out.
		p.TrackMem = float64((b.memory-b.clMem)-(a.memory-a.clMem)) / float64(d)
	}
	return nil
}

// round has process r rebuild key while the nw processes after it wait
// for it, and records their wake-ups: from the loader's return in r to
// each waiter's GetOrLoad returning.
func (ct *controller) round(ctx context.Context, p *point, key string, r, nw, n int) error {
	if err := ct.f.Send(r, fmt.Sprintf("rebuild %s %d", key, ct.cfg.load.Milliseconds())); err != nil {
		return err
	}
	lines, err := ct.collect(ctx, 1)
	if err != nil {
		return err
	}
	if lines[r] != "claimed" {
		return fmt.Errorf("rebuilder said %q, want claimed", lines[r])
	}
	var ws []int
	for i := 1; i <= nw; i++ {
		ws = append(ws, (r+i)%n)
	}
	for _, w := range ws {
		if err := ct.f.Send(w, "wait "+key); err != nil {
			return err
		}
	}
	lines, err = ct.collect(ctx, nw+1)
	if err != nil {
		return err
	}
	var end int64
	var msg string
	if _, err := fmt.Sscanf(lines[r], "rebuilt %d %q", &end, &msg); err != nil {
		return fmt.Errorf("rebuilder said %q: %w", lines[r], err)
	}
	p.count(msg)
	for _, w := range ws {
		var at int64
		var waited int
		if _, err := fmt.Sscanf(lines[w], "waited %d %d %q", &at, &waited, &msg); err != nil {
			return fmt.Errorf("waiter said %q: %w", lines[w], err)
		}
		p.count(msg)
		if waited == 0 {
			p.NotWaited++
			continue
		}
		p.Wake = append(p.Wake, time.Duration(at-end))
	}
	return nil
}

// count records a failed call's text, if any.
func (p *point) count(msg string) {
	if msg == "" {
		return
	}
	if p.Errors++; p.FirstErr == "" {
		p.FirstErr = msg
	}
}

// run measures every design and fleet size of ct.cfg.
func (ct *controller) run(ctx context.Context, progress func(string)) ([]point, error) {
	var all []point
	type variant struct {
		design string
		near   bool
	}
	var vs []variant
	for _, d := range ct.cfg.designs {
		vs = append(vs, variant{d, false})
	}
	if ct.cfg.near {
		vs = append(vs, variant{ct.cfg.designs[len(ct.cfg.designs)-1], true})
	}
	for _, v := range vs {
		for _, n := range ct.cfg.procs {
			t := time.Now()
			ps, err := ct.runPoint(ctx, v.design, v.near, n)
			if err != nil {
				return all, fmt.Errorf("%s, %d processes: %w", v.design, n, err)
			}
			all = append(all, ps...)
			progress(fmt.Sprintf("%s near=%v N=%d: %.1fs", v.design, v.near, n, time.Since(t).Seconds()))
		}
	}
	return all, nil
}

// percentile returns the p-th percentile (0-100) of ds, nearest rank.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}
