// This file holds the coherence check: every completed Delete is recorded
// on the database with the time it returned, and every GetOrLoad is checked
// against those records: a read that began more than the coherence bound
// after a Delete completed must not return a version that Delete
// superseded. It also counts what the near cache logs about its tracking
// connections.

package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/codec"
	"github.com/redis/go-redis/v9"
)

// The coherence bound. A near cache serves an entry only while a ping it
// sent on its tracking connection less than Near.Lease ago was answered,
// and the server sends an invalidation before it answers a later ping on
// the same connection; so a value superseded at t (the server sent the
// invalidation by then) is not served after t + Lease, whatever the
// faults: a healthy connection drops it when the invalidation arrives
// (well under a millisecond on loopback), a black-holed one lapses, a
// reset one is flushed. The check uses Lease plus a margin (-near-margin,
// 50 ms by default) for what lies between the moments the soak measures
// and the ones that matter: the reader's clock read before GetOrLoad and
// its look-up, a worker descheduled on a shared machine. The times are
// wall-clock times of processes on one machine, so they compare.
//
// The check runs in every worker, with the same bound, and the two kinds
// are reported apart: in a worker without the near cache a read older
// than the bound has no legitimate cause either (the server held no such
// value: that would be a stale set; or a joined load predated the Delete),
// with one exception that GetOrLoad documents: while failing open, a call
// makes no promise about Deletes in other processes. A caller whose own
// read failed, or that began during the fail-open cool-down, joins a load
// of its process that may have begun before such a Delete, and takes its
// result (cache/wait.go, outcome.accepts: a caller without a read of its
// own accepts any result). Such reads are counted apart and do not fail
// the run: a read older than the bound that the near cache did not answer
// (the Observer, which runs in the caller's goroutine, saw no near hit in
// the reader's goroutine during the call), made while the worker's Cache
// may have been failing open (a server error less than FailOpenCooldown
// before the call began, or during it). A read the near cache answered is
// never excused.
//
// Each violation is described in the samples with the key's recent
// events in the worker (the Cache's events and the loader's reads).

// superseded bucket bounds: how long after the Delete that superseded its
// version a read began, for reads that returned a superseded version.
var ageBuckets = []time.Duration{time.Millisecond, 5 * time.Millisecond, 25 * time.Millisecond, 100 * time.Millisecond}

// coherence counts a worker's reads that returned a superseded version.
type coherence struct {
	checked   atomic.Int64
	ages      [5]atomic.Int64 // by ageBuckets, then "up to the bound"
	violation atomic.Int64    // began more than the bound after the supersession
	failOpen  atomic.Int64    // the same, while failing open and not from the near cache
	starved   atomic.Int64    // the same, from the near cache, within the overrun a stall of the process allows
	maxAge    atomic.Int64    // ns, of the reads within the bound
	errs      atomic.Int64    // checks that could not read the records

	// For the description of a violation: per key, the near cache's hits
	// (counted by the Observer of the worker's value Cache), the last
	// one's time (Unix ns), and the recent events.
	nearHits, lastNearHit []atomic.Int64
	history               []keyHistory

	// The Cache's server errors, and the last one's time (Unix ns): each
	// transport error starts the fail-open cool-down.
	serverErrs, lastServerErr atomic.Int64

	// The near hits by goroutine (*atomic.Int64 by goroutine id): the
	// Observer runs in the caller's goroutine, so a read knows exactly
	// whether the near cache answered it.
	byGoroutine sync.Map
}

// goroutineHits returns the near-hit counter of the calling goroutine.
func (c *coherence) goroutineHits() *atomic.Int64 {
	id := goid()
	if p, ok := c.byGoroutine.Load(id); ok {
		return p.(*atomic.Int64)
	}
	p, _ := c.byGoroutine.LoadOrStore(id, new(atomic.Int64))
	return p.(*atomic.Int64)
}

// goid returns the calling goroutine's id, from the first line of its
// stack ("goroutine 123 [running]:"). The soak needs it only to tell a
// read answered by the near cache from one that was not.
func goid() uint64 {
	var b [64]byte
	s := b[:runtime.Stack(b[:], false)]
	s = bytes.TrimPrefix(s, []byte("goroutine "))
	var id uint64
	for _, ch := range s {
		if ch < '0' || ch > '9' {
			break
		}
		id = id*10 + uint64(ch-'0')
	}
	return id
}

// readStart is what checkRead needs to know of the moment a read began.
type readStart struct {
	began                     time.Time
	keyHits                   int64         // near hits of the key, by every goroutine
	mine                      *atomic.Int64 // near hits of this goroutine
	mineAtStart               int64
	serverErrs, lastServerErr int64
}

func (c *coherence) start(k int) readStart {
	mine := c.goroutineHits()
	return readStart{keyHits: c.nearHits[k].Load(), mine: mine, mineAtStart: mine.Load(),
		serverErrs: c.serverErrs.Load(), lastServerErr: c.lastServerErr.Load(), began: time.Now()}
}

// observe is the Observer of the worker's value Cache.
func (c *coherence) observe(e cache.Event) {
	k, err := strconv.Atoi(strings.TrimPrefix(e.Key, "k"))
	if err != nil || k < 0 || k >= len(c.nearHits) {
		return
	}
	now := time.Now().UnixNano()
	if e.Kind == cache.EventServerError {
		c.lastServerErr.Store(now)
		c.serverErrs.Add(1)
	}
	if e.Near {
		c.nearHits[k].Add(1)
		c.lastNearHit[k].Store(now)
		c.goroutineHits().Add(1)
	}
	what := e.Kind.String()
	if e.Near {
		what = "near " + what
	}
	if e.Duration > 0 {
		what += " " + e.Duration.Round(time.Microsecond).String()
	}
	if e.Err != nil {
		what += " (" + errKind(e.Err) + ")"
	}
	c.history[k].add(now, what)
}

// keyHistory is the last events of one key in a worker: its Cache's
// events and its loader's reads, for the description of a violation.
type keyHistory struct {
	mu   sync.Mutex // guards the fields below
	evs  [256]keyEvent
	next int
}

type keyEvent struct {
	at   int64 // Unix ns
	what string
}

func (h *keyHistory) add(at int64, what string) {
	h.mu.Lock()
	h.evs[h.next%len(h.evs)] = keyEvent{at, what}
	h.next++
	h.mu.Unlock()
}

// since renders the events from from on, with times relative to zero.
func (h *keyHistory) since(from, zero int64) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var b strings.Builder
	for i := max(0, h.next-len(h.evs)); i < h.next; i++ {
		e := h.evs[i%len(h.evs)]
		if e.at < from {
			continue
		}
		fmt.Fprintf(&b, "; %+.1fms %s", float64(e.at-zero)/1e6, e.what)
	}
	return b.String()
}

// coherenceReport is the coherence part of a worker's report.
type coherenceReport struct {
	Checked    int64   `json:"checked"`       // reads checked
	Superseded []int64 `json:"superseded"`    // reads of a superseded version within the bound, by age: <=1ms, <=5ms, <=25ms, <=100ms, <=bound
	Violations int64   `json:"violations"`    // reads of a version superseded more than the bound before they began
	FailOpen   int64   `json:"fail_open"`     // the same, not from the near cache and while failing open (excused)
	Starved    int64   `json:"starved"`       // the same, from the near cache, within the Lease overrun a stall of the process allows (excused)
	MaxAge     int64   `json:"max_age_ns"`    // the oldest supersession a read within the bound returned
	Errors     int64   `json:"check_errors"`  // checks that could not read the records
	Lost       int64   `json:"tracking_lost"` // "tracking connection lost" logged by this worker's caches
	Off        int64   `json:"near_off"`      // "near cache off" logged (the server refused tracking)
}

func (c *coherence) report() coherenceReport {
	r := coherenceReport{Checked: c.checked.Load(), Violations: c.violation.Load(), FailOpen: c.failOpen.Load(), Starved: c.starved.Load(), MaxAge: c.maxAge.Load(), Errors: c.errs.Load()}
	for i := range c.ages {
		r.Superseded = append(r.Superseded, c.ages[i].Load())
	}
	return r
}

// add adds o to r (for the summary).
func (r coherenceReport) add(o coherenceReport) coherenceReport {
	r.Checked += o.Checked
	r.Violations += o.Violations
	r.FailOpen += o.FailOpen
	r.Starved += o.Starved
	r.MaxAge = max(r.MaxAge, o.MaxAge)
	r.Errors += o.Errors
	r.Lost += o.Lost
	r.Off += o.Off
	if r.Superseded == nil {
		r.Superseded = make([]int64, len(ageBuckets)+1)
	}
	for i, n := range o.Superseded {
		r.Superseded[i] += n
	}
	return r
}

// superseded is how many reads returned a superseded version within the
// bound.
func (r coherenceReport) superseded() int64 {
	var n int64
	for _, x := range r.Superseded {
		n += x
	}
	return n
}

// record keeps, on the database, the version of a key's latest completed
// Delete (for the audits) and the time every Delete returned, by the
// version it followed (for the coherence check); the 4096 latest versions
// are kept. Versions come from INCR, so each has one Delete.
// KEYS[1]=latest completed Delete's version; KEYS[2]=Deletes by version;
// ARGV[1]=version; ARGV[2]=the time the Delete returned (Unix ns).
var record = redis.NewScript(`
if tonumber(ARGV[1]) > tonumber(redis.call('GET', KEYS[1]) or '0') then redis.call('SET', KEYS[1], ARGV[1]) end
redis.call('ZADD', KEYS[2], ARGV[1], ARGV[2])
redis.call('ZREMRANGEBYRANK', KEYS[2], 0, -4097)
return 0`)

// checkRead checks a read (op) of key k that began at began and returned
// version ver against the Deletes recorded so far. The Deletes that
// superseded ver are those of later versions; the earliest that returned
// before the read began decides. Only its record must be there when this
// runs, and it was written right after that Delete returned, at least
// the bound ago. (A Delete recorded late is missed, which can hide a
// violation, never invent one.)
func (w *worker) checkRead(ctx context.Context, op string, k int, v string, ver int64, st readStart) {
	ended, began := time.Now(), st.began
	c := &w.coh
	c.checked.Add(1)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	first, by, err := w.superseded(ctx, k, ver, began)
	if err != nil {
		c.errs.Add(1)
		return
	}
	if first < 0 {
		return // nothing superseded ver before the read began
	}
	age := time.Duration(began.UnixNano() - first)
	if age > w.cfg.Bound {
		near := st.mine.Load() != st.mineAtStart // the near cache answered this read
		failingOpen := !near && (c.serverErrs.Load() != st.serverErrs || st.lastServerErr >= began.Add(-failOpenCooldown).UnixNano())
		// The near cache's clock lags while the process is starved: the
		// Lease may be overrun by the lag beyond half a Lease.
		stalled := w.stalls.worst(first, ended.UnixNano())
		starved := near && age <= w.cfg.Bound+max(0, stalled-w.cfg.NearLease/2)
		what := "older than the bound"
		switch {
		case failingOpen:
			c.failOpen.Add(1)
			what = "older than the bound while failing open"
		case starved:
			c.starved.Add(1)
			what = fmt.Sprintf("older than the bound in a process stalled %v", stalled.Round(time.Millisecond))
		default:
			c.violation.Add(1)
		}
		// Where did it come from? The server's value now, over the
		// direct client: the same old version there is a stale set.
		held := "?"
		if raw, err := w.direct.Get(ctx, namespace(w.cfg.Prefix)+":{"+cacheKey(k)+"}").Bytes(); err == nil {
			held = describe(raw)
		} else if err == redis.Nil {
			held = "nothing"
		}
		how := ""
		if w.cfg.Near {
			last := time.Unix(0, c.lastNearHit[k].Load())
			how = fmt.Sprintf(" (answered by the near cache: %v; it answered %d reads of the key in this worker during the call, the last %v after the call began)",
				near, c.nearHits[k].Load()-st.keyHits, last.Sub(began).Round(time.Microsecond))
		}
		w.sampleViolation(failingOpen, fmt.Sprintf("%s: %s (near %v): %s(%s) began %v after the Delete that followed version %d returned (bound %v), took %v and returned %s%s; the server holds %s now; the key's events in this worker, ms after the call began%s",
			what, w.name(), w.cfg.Near, op, cacheKey(k), age.Round(time.Microsecond), by, w.cfg.Bound, ended.Sub(began).Round(time.Microsecond), v, how, held,
			c.history[k].since(first-int64(time.Second), began.UnixNano())))
		return
	}
	i := 0
	for i < len(ageBuckets) && age > ageBuckets[i] {
		i++
	}
	c.ages[i].Add(1)
	for {
		m := c.maxAge.Load()
		if int64(age) <= m || c.maxAge.CompareAndSwap(m, int64(age)) {
			break
		}
	}
}

// superseded returns when the earliest recorded Delete that superseded
// version ver of key k returned before at (Unix ns), and the version it
// followed; first is -1 if none did.
func (w *worker) superseded(ctx context.Context, k int, ver int64, at time.Time) (first, by int64, err error) {
	// The first Deletes after ver: in version order, which is nearly the
	// order they returned in.
	zs, err := w.direct.ZRangeByScoreWithScores(ctx, histKey(w.cfg.Prefix, k), &redis.ZRangeBy{
		Min: "(" + strconv.FormatInt(ver, 10), Max: "+inf", Count: 64}).Result()
	if err != nil {
		return -1, 0, err
	}
	first = -1
	for _, z := range zs {
		t, err := strconv.ParseInt(z.Member.(string), 10, 64)
		if err != nil || t > at.UnixNano() {
			continue
		}
		if first < 0 || t < first {
			first, by = t, int64(z.Score)
		}
	}
	return first, by, nil
}

// logCounter is the slog.Handler of the worker's caches: it counts what
// the near cache says about its tracking connections and drops the rest.
type logCounter struct{ w *worker }

func (logCounter) Enabled(context.Context, slog.Level) bool { return true }

func (h logCounter) Handle(_ context.Context, r slog.Record) error {
	switch {
	case strings.Contains(r.Message, "tracking connection lost"):
		h.w.trackingLost.Add(1)
	case strings.Contains(r.Message, "near cache off"):
		h.w.nearOff.Add(1)
	}
	return nil
}

func (h logCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h logCounter) WithGroup(string) slog.Handler      { return h }

// describe names a stored value: "key@version@worker", or what it is.
func describe(raw []byte) string {
	e, err := codec.Decode(raw)
	if err != nil {
		return "a rebuild claim"
	}
	if e.NotFound {
		return "a not-found"
	}
	var v string
	if err := cache.Msgpack.Unmarshal(e.Payload, &v); err != nil {
		return "an undecodable value"
	}
	return v
}

// sampleViolation keeps the first few descriptions of reads older than
// the bound, apart from the other samples: 4 violations and 2 excused
// ones (failOpen).
func (w *worker) sampleViolation(failOpen bool, s string) {
	w.mu.Lock()
	if failOpen && w.excused < 2 || !failOpen && len(w.violations)-w.excused < 4 {
		w.violations = append(w.violations, s)
		if failOpen {
			w.excused++
		}
	}
	w.mu.Unlock()
}
