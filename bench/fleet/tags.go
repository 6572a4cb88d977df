package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The tag measurement (-tags, issue 40): values under tags in every
// process's near cache, and what InvalidateTag and SoftInvalidateTag cost
// and how soon every process stops serving the values. Worker 0
// invalidates and writes; workers 1 to readers read, each with a near
// cache holding every value. Three phases:
//
//   - hard: rounds of an InvalidateTag of one tag (each reader polls one
//     of its values, a different one each, until it stops being served),
//     each followed by a Set of one untagged key every reader polls: the
//     coherence bound the docs state, in the same run, as the baseline.
//     After seeing the change a reader reads every value of the tag: none
//     may be served.
//   - soft: SoftInvalidateTag of one tag, then every reader reads every
//     value of it with GetOrLoad while the loaders of the refreshes this
//     starts are held back (until every reader has read): each read must
//     be served the old value, none may wait, and the loader must run once
//     per value across the fleet.
//   - bytes: the server's bytes per InvalidateTag with one reader of the
//     tag and idle processes (near caches holding every other tag's
//     values, never this one's), against the one reader alone.

// tagConfig is what the tag measurement runs.
type tagConfig struct {
	keys, tags  int           // values, and the tags they are spread over (key i has tag i mod tags)
	readers     int           // reading processes (near caches on), besides the invalidating one
	rounds      int           // hard phase: InvalidateTag calls, each followed by a Set
	soft        int           // soft phase: SoftInvalidateTag calls
	bytesRounds int           // bytes phase: InvalidateTag calls per point
	idle        int           // bytes phase: idle processes beside the one reader
	pace        time.Duration // how long readers sleep between polls (0: a tight loop)
	value       int           // bytes of each value
}

func (c tagConfig) perTag() int { return (c.keys + c.tags - 1) / c.tags }

// check says what is wrong with c, or nil.
func (c tagConfig) check() error {
	switch {
	case c.tags < 1 || c.keys < c.tags:
		return errors.New("-tag-keys must be at least -tag-count, which must be at least 1")
	case c.readers < 1 || c.readers > 63:
		return errors.New("-tag-readers: 1 to 63")
	case c.rounds < 1 || c.soft < 1 || c.bytesRounds < 1:
		return errors.New("-tag-rounds, -tag-soft and -tag-bytes-rounds must be at least 1")
	case c.rounds+c.soft > c.tags:
		// Each soft round needs a tag no hard round invalidated: its
		// values must be there to be served stale.
		return fmt.Errorf("-tag-rounds + -tag-soft (%d) must be at most -tag-count (%d)", c.rounds+c.soft, c.tags)
	case c.idle < 0 || c.idle+1 > c.readers:
		return fmt.Errorf("-tag-idle: 0 to %d (the readers less the one that reads)", c.readers-1)
	}
	return nil
}

// tagRun is what the tag measurement measured.
type tagRun struct {
	Cfg                tagConfig
	Held, HeldNear     int // values each reader held; the fewest of them its near cache answered on a second read
	HoldLoads          int // loader calls while the readers read them in (0: all were written before)
	Hard, Set          opStats
	Soft               softStats
	Bytes              []bytesPoint
	Errors             int
	FirstErr           string
	SoftWarmRoundTrips int64  // the first SoftInvalidateTag on the server (it loads the script)
	SoftWarmTag        string // the tag of that call, which no value has
}

// opStats sums up one kind of call of the hard phase.
type opStats struct {
	Calls      int
	RoundTrips []int64         // per call: single commands and pipelines the Cache sent
	Cmds       []int64         // per call: commands in them
	CallLat    []time.Duration // per call: how long it took
	Coh        []time.Duration // per call and reader: from the call's return to the reader no longer served the old value
	FromStart  []time.Duration // per call and reader: as Coh, from the call's start (a call that returns later gets no head start)
	Dropped    []time.Duration // per call and reader: from the call's return to the start of the read that saw the change (its near cache had let the value go)
	Early      int             // of Coh: the reader saw the change before the call returned (counted as 0)
	NearBefore int             // of Coh: the read before the change was answered by the near cache
	Msgs       int64           // tracking messages the readers were sent
	Served     int             // hard: values of the tag served after the reader saw the change
	Swept      int             // hard: reads of the tag's values after the change
}

// softStats sums up the soft phase.
type softStats struct {
	Rounds     int
	RoundTrips []int64
	Cmds       []int64
	CallLat    []time.Duration
	Calls      int // GetOrLoad calls after a SoftInvalidateTag, loaders held back
	Old, New   int // answered with the value before, or the refreshed one
	Errs       int
	FirstErr   string
	Waits      int64           // Stats.Waits deltas, summed
	StaleHits  int64           // Stats.StaleHits deltas, summed
	Hits       int64           // Stats.Hits deltas (fresh hits), summed
	Coh        []time.Duration // per call and reader: from the call's return to the reader's near cache told of it
	Early      int             // of Coh: told before the call returned (counted as 0)
	Lat        []time.Duration // of the calls
	Loads      int64           // loader calls in the fleet
	Values     int             // values invalidated (rounds × values per tag)
}

// bytesPoint is one fleet of the bytes phase.
type bytesPoint struct {
	N, Idle      int // processes open (the invalidating one included), of which idle
	Calls        int
	Elapsed      time.Duration
	ServerBytes  int64 // INFO total_net_output_bytes delta, less the controller's INFO reply
	CmdBytes     int64 // of which replies on connections that never subscribed (the processes' commands, the reader's fills)
	SubBytes     int64 // of which on tracking and pub/sub connections
	ReaderMsgs   int64 // tracking messages the reader was sent
	IdleMsgs     int64 // tracking and pub/sub messages the idle processes were sent
	IdleBytes    int64 // bytes the idle processes read
	RoundTrips   int64 // of the InvalidateTag calls, summed
	HeldPerIdle  int   // values each idle process held
	ReaderHeld   int
	IdleNearMiss int // values an idle process's near cache did not answer on the second read (0)
}

func (p bytesPoint) perCall(v int64) float64 { return float64(v) / float64(max(1, p.Calls)) }

// fail records a failed call's text.
func (r *tagRun) fail(msg string) {
	if msg == "" {
		return
	}
	if r.Errors++; r.FirstErr == "" {
		r.FirstErr = msg
	}
}

// workers returns the indexes from to to-1.
func workers(from, to int) []int {
	var ws []int
	for i := from; i < to; i++ {
		ws = append(ws, i)
	}
	return ws
}

// runTags runs the three phases on ct's workers (cfg.readers+1 of them).
func (ct *controller) runTags(ctx context.Context, cfg tagConfig, progress func(string)) (*tagRun, error) {
	r := &tagRun{Cfg: cfg}
	readers := workers(1, cfg.readers+1)
	all := workers(0, cfg.readers+1)
	maxEntries := cfg.keys + cfg.tags + 1000
	t := time.Now()
	if err := ct.tagOpen(ctx, all, "tags-coherence", maxEntries); err != nil {
		return r, err
	}
	if _, err := ct.ask(ctx, []int{0}, fmt.Sprintf("tfill %d %d", cfg.keys, cfg.tags)); err != nil {
		return r, fmt.Errorf("fill: %w", err)
	}
	if _, err := ct.op(ctx, "set", "s", 0); err != nil {
		return r, err
	}
	held, err := ct.tagHold(ctx, readers, fmt.Sprintf("thold %d %d -1", cfg.keys, cfg.tags))
	if err != nil {
		return r, err
	}
	r.Held, r.HeldNear = held.held, held.near
	r.HoldLoads = held.loads
	progress(fmt.Sprintf("tags: %d values under %d tags in the near caches of %d readers: %.1fs", cfg.keys, cfg.tags, cfg.readers, time.Since(t).Seconds()))

	t = time.Now()
	for round := range cfg.rounds {
		tag := round % cfg.tags
		keys := make([]string, len(readers))
		for i := range readers {
			keys[i] = tagKey(tag + cfg.tags*(i%cfg.perTag()))
		}
		if err := ct.tagRound(ctx, r, &r.Hard, round, readers, keys, tag, "inval", tagName(tag), 0); err != nil {
			return r, fmt.Errorf("InvalidateTag round %d: %w", round, err)
		}
		for i := range keys {
			keys[i] = "s"
		}
		if err := ct.tagRound(ctx, r, &r.Set, round, readers, keys, -1, "set", "s", round+1); err != nil {
			return r, fmt.Errorf("round %d of Set: %w", round, err)
		}
	}
	progress(fmt.Sprintf("tags: %d InvalidateTag and %d Set rounds: %.1fs", cfg.rounds, cfg.rounds, time.Since(t).Seconds()))

	t = time.Now()
	if err := ct.softPhase(ctx, r, readers); err != nil {
		return r, fmt.Errorf("soft: %w", err)
	}
	progress(fmt.Sprintf("tags: %d SoftInvalidateTag rounds: %.1fs", cfg.soft, time.Since(t).Seconds()))
	if _, err := ct.ask(ctx, all, "close"); err != nil {
		return r, err
	}

	for _, idle := range []int{0, cfg.idle} {
		t = time.Now()
		p, err := ct.bytesPoint(ctx, r, idle, maxEntries)
		if err != nil {
			return r, fmt.Errorf("bytes, %d idle: %w", idle, err)
		}
		r.Bytes = append(r.Bytes, p)
		progress(fmt.Sprintf("tags: bytes with %d idle processes: %.1fs", idle, time.Since(t).Seconds()))
	}
	return r, nil
}

// tagOpen opens a Cache with a near cache in namespace ns on workers ws.
func (ct *controller) tagOpen(ctx context.Context, ws []int, ns string, maxEntries int) error {
	if _, err := ct.ask(ctx, ws, fmt.Sprintf("topen %s %d %d", ns, maxEntries, ct.cfg.value)); err != nil {
		return fmt.Errorf("open: %w", err)
	}
	return nil
}

// holding is what the workers of a thold said: the values each held,
// the fewest its near cache answered, and the loader calls.
type holding struct{ held, near, loads int }

func (ct *controller) tagHold(ctx context.Context, ws []int, line string) (holding, error) {
	lines, err := ct.ask(ctx, ws, line)
	if err != nil {
		return holding{}, fmt.Errorf("hold: %w", err)
	}
	h := holding{near: -1}
	for w, l := range lines {
		var held, near, loads int
		if _, err := fmt.Sscanf(l, "held %d %d %d", &held, &near, &loads); err != nil {
			return h, fmt.Errorf("worker %d said %q: %w", w, l, err)
		}
		h.held = held
		if h.near < 0 || near < h.near {
			h.near = near
		}
		h.loads += loads
	}
	return h, nil
}

// opResult is what worker 0 said of one call.
type opResult struct {
	start, end  int64 // Unix ns
	calls, cmds int64
	err         string
}

func parseOp(line string) (opResult, error) {
	var o opResult
	if _, err := fmt.Sscanf(line, "op %d %d %d %d %q", &o.start, &o.end, &o.calls, &o.cmds, &o.err); err != nil {
		return o, fmt.Errorf("invalidator said %q: %w", line, err)
	}
	return o, nil
}

// op has worker 0 run one call and waits for it.
func (ct *controller) op(ctx context.Context, kind, target string, gen int) (opResult, error) {
	lines, err := ct.ask(ctx, []int{0}, fmt.Sprintf("top %s %s %d", kind, target, gen))
	if err != nil {
		return opResult{}, err
	}
	o, err := parseOp(lines[0])
	if err == nil && o.err != "" {
		err = fmt.Errorf("%s %s: %s", kind, target, o.err)
	}
	return o, err
}

// tagRound arms every reader on its key (readers[i] polls keys[i]), has
// worker 0 run the call, and records when each reader saw the change.
// With sweep >= 0 each reader then reads every value of that tag.
func (ct *controller) tagRound(ctx context.Context, r *tagRun, s *opStats, round int, readers []int, keys []string, sweep int, kind, target string, gen int) error {
	before, _, err := ct.stats(ctx, readers)
	if err != nil {
		return err
	}
	for i, w := range readers {
		line := fmt.Sprintf("tarm %d %s %d %d %d %d", round, keys[i], sweep, r.Cfg.keys, r.Cfg.tags, r.Cfg.pace.Nanoseconds())
		if err := ct.f.Send(w, line); err != nil {
			return err
		}
	}
	armed, err := ct.collect(ctx, len(readers))
	if err != nil {
		return fmt.Errorf("arm: %w", err)
	}
	for w, l := range armed {
		if l != "armed" {
			return fmt.Errorf("reader %d said %q, want armed", w, l)
		}
	}
	if err := ct.f.Send(0, fmt.Sprintf("top %s %s %d", kind, target, gen)); err != nil {
		return err
	}
	lines, err := ct.collect(ctx, len(readers)+1)
	if err != nil {
		return err
	}
	o, err := parseOp(lines[0])
	if err != nil {
		return err
	}
	r.fail(o.err)
	s.Calls++
	s.RoundTrips = append(s.RoundTrips, o.calls)
	s.Cmds = append(s.Cmds, o.cmds)
	s.CallLat = append(s.CallLat, time.Duration(o.end-o.start))
	for _, w := range readers {
		var rd, near, served, swept int
		var at, began int64
		var what string
		if _, err := fmt.Sscanf(lines[w], "seen %d %d %d %d %s %d %d", &rd, &at, &began, &near, &what, &served, &swept); err != nil {
			return fmt.Errorf("reader %d said %q: %w", w, lines[w], err)
		}
		if rd != round {
			return fmt.Errorf("reader %d saw round %d, want %d", w, rd, round)
		}
		if kind == "inval" && what != "miss" {
			r.fail(fmt.Sprintf("reader %d was served another value after InvalidateTag, want a miss", w))
		}
		lat := time.Duration(at - o.end)
		if lat < 0 {
			s.Early++
			lat = 0
		}
		s.Coh = append(s.Coh, lat)
		s.FromStart = append(s.FromStart, time.Duration(at-o.start))
		s.Dropped = append(s.Dropped, max(0, time.Duration(min(began, at)-o.end)))
		s.NearBefore += near
		s.Served += served
		s.Swept += swept
	}
	after, _, err := ct.stats(ctx, readers)
	if err != nil {
		return err
	}
	s.Msgs += after.Invals - before.Invals
	return nil
}

// softPhase runs the soft rounds, each on a tag no hard round touched.
func (ct *controller) softPhase(ctx context.Context, r *tagRun, readers []int) error {
	cfg := r.Cfg
	// The server learns the script on the first call (NOSCRIPT, SCRIPT
	// LOAD, the call again): on a tag nobody uses, so that the measured
	// calls find it loaded.
	r.SoftWarmTag = "unused-tag"
	warm, err := ct.op(ctx, "soft", r.SoftWarmTag, 0)
	if err != nil {
		return err
	}
	r.SoftWarmRoundTrips = warm.calls
	s := &r.Soft
	for round := range cfg.soft {
		tag := cfg.rounds + round
		if _, err := ct.ask(ctx, readers, "tsoftarm"); err != nil {
			return err
		}
		o, err := ct.op(ctx, "soft", tagName(tag), 0)
		if err != nil {
			return err
		}
		s.Rounds++
		s.RoundTrips = append(s.RoundTrips, o.calls)
		s.Cmds = append(s.Cmds, o.cmds)
		s.CallLat = append(s.CallLat, time.Duration(o.end-o.start))
		lines, err := ct.ask(ctx, readers, fmt.Sprintf("tsoftread %d %d %d 0 %d", tag, cfg.keys, cfg.tags, cfg.pace.Nanoseconds()))
		if err != nil {
			return fmt.Errorf("read: %w", err)
		}
		for w, l := range lines {
			b, ok := strings.CutPrefix(l, "softread ")
			var sr softRead
			if !ok {
				return fmt.Errorf("reader %d said %q, want softread", w, l)
			}
			if err := json.Unmarshal([]byte(b), &sr); err != nil {
				return err
			}
			s.Calls += sr.Calls
			s.Old += sr.Old
			s.New += sr.New
			s.Errs += sr.Errs
			if s.FirstErr == "" {
				s.FirstErr = sr.FirstErr
			}
			s.Waits += sr.Waits
			s.StaleHits += sr.StaleHits
			s.Hits += sr.Hits
			told := time.Duration(sr.Told - o.end)
			if told < 0 {
				s.Early++
				told = 0
			}
			s.Coh = append(s.Coh, told)
			for _, ns := range sr.Lat {
				s.Lat = append(s.Lat, time.Duration(ns))
			}
		}
		if _, err := ct.ask(ctx, readers, fmt.Sprintf("tsoftsettle %d %d %d 0", tag, cfg.keys, cfg.tags)); err != nil {
			return fmt.Errorf("settle: %w", err)
		}
		s.Values += len(tagKeys(tag, cfg.keys, cfg.tags))
	}
	// A refresh that began late would load after the values settled:
	// the loads are counted once the fleet is quiet.
	if _, _, err := ct.quiesce(ctx, readers); err != nil {
		return err
	}
	lines, err := ct.ask(ctx, readers, "tloads")
	if err != nil {
		return err
	}
	for w, l := range lines {
		n, err := strconv.ParseInt(strings.TrimPrefix(l, "loads "), 10, 64)
		if err != nil {
			return fmt.Errorf("reader %d said %q: %w", w, l, err)
		}
		s.Loads += n // loader calls of soft rounds only, since the Caches opened
	}
	return nil
}

// bytesPoint measures the server's bytes per InvalidateTag with worker 1
// reading the tag (tag 0) and idle processes (workers 2, 3, ...) holding
// every other tag's values in their near caches.
func (ct *controller) bytesPoint(ctx context.Context, r *tagRun, idle, maxEntries int) (bytesPoint, error) {
	cfg := r.Cfg
	ws := workers(0, idle+2)
	idles := workers(2, idle+2)
	p := bytesPoint{N: len(ws), Idle: idle, Calls: cfg.bytesRounds}
	if err := ct.tagOpen(ctx, ws, fmt.Sprintf("tags-bytes-%d", idle), maxEntries); err != nil {
		return p, err
	}
	defer func() { _, _ = ct.ask(context.WithoutCancel(ctx), ws, "close") }()
	if _, err := ct.ask(ctx, []int{0}, fmt.Sprintf("tfill %d %d", cfg.keys, cfg.tags)); err != nil {
		return p, fmt.Errorf("fill: %w", err)
	}
	h, err := ct.tagHold(ctx, []int{1}, fmt.Sprintf("thold %d %d -1", cfg.keys, cfg.tags))
	if err != nil {
		return p, err
	}
	p.ReaderHeld = h.held
	if idle > 0 {
		h, err := ct.tagHold(ctx, idles, fmt.Sprintf("thold %d %d 0", cfg.keys, cfg.tags))
		if err != nil {
			return p, err
		}
		p.HeldPerIdle, p.IdleNearMiss = h.held, h.held-h.near
	}
	_, perBefore, err := ct.quiesce(ctx, ws)
	if err != nil {
		return p, err
	}
	i0, err := info(ctx, ct.nodes)
	if err != nil {
		return p, err
	}
	start := time.Now()
	for round := range cfg.bytesRounds {
		key := tagKey(cfg.tags * (round % cfg.perTag())) // a value of tag 0
		lines, err := ct.ask(ctx, []int{1}, fmt.Sprintf("twatch %s %d", key, cfg.pace.Nanoseconds()))
		if err != nil {
			return p, err
		}
		if lines[1] != "watching" {
			return p, fmt.Errorf("reader said %q, want watching", lines[1])
		}
		if err := ct.f.Send(0, "top inval "+tagName(0)+" 0"); err != nil {
			return p, err
		}
		lines, err = ct.collect(ctx, 2)
		if err != nil {
			return p, err
		}
		o, err := parseOp(lines[0])
		if err != nil {
			return p, err
		}
		r.fail(o.err)
		p.RoundTrips += o.calls
		if lines[1] != "told" {
			return p, fmt.Errorf("reader said %q, want told", lines[1])
		}
	}
	p.Elapsed = time.Since(start)
	i1, err := info(ctx, ct.nodes)
	if err != nil {
		return p, err
	}
	// What the processes read in the same window as the server's bytes
	// (the stats go over the workers' pipes, not to the server)...
	_, perEnd, err := ct.stats(ctx, ws)
	if err != nil {
		return p, err
	}
	// ...and what the idle ones were sent, late deliveries included,
	// once the fleet is quiet.
	_, perAfter, err := ct.quiesce(ctx, ws)
	if err != nil {
		return p, err
	}
	p.ServerBytes = i1.netOut - i0.netOut - ct.overhead
	for _, w := range ws {
		d := perEnd[w].sub(perBefore[w])
		p.CmdBytes += d.CmdBytes
		p.SubBytes += d.SubBytes
		late := perAfter[w].sub(perBefore[w])
		switch {
		case w == 1:
			p.ReaderMsgs += late.Invals
		case w >= 2:
			p.IdleMsgs += late.Invals + late.Messages + late.SMessages
			p.IdleBytes += d.CmdBytes + d.SubBytes
		}
	}
	return p, nil
}
