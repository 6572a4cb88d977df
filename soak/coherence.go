// This file holds the coherence check: every completed Delete is recorded
// on the database with the time it returned, and every GetOrLoad is checked
// against those records: a read that began more than the coherence bound
// after a Delete completed must not return a version that Delete
// superseded. It also counts what the near cache logs about its tracking
// connections.

package main

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
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
// value: that would be a stale set; or a joined load predated the Delete).

// superseded bucket bounds: how long after the Delete that superseded its
// version a read began, for reads that returned a superseded version.
var ageBuckets = []time.Duration{time.Millisecond, 5 * time.Millisecond, 25 * time.Millisecond, 100 * time.Millisecond}

// coherence counts a worker's reads that returned a superseded version.
type coherence struct {
	checked   atomic.Int64
	ages      [5]atomic.Int64 // by ageBuckets, then "up to the bound"
	violation atomic.Int64    // began more than the bound after the supersession
	maxAge    atomic.Int64    // ns, of the reads within the bound
	errs      atomic.Int64    // checks that could not read the records
}

// coherenceReport is the coherence part of a worker's report.
type coherenceReport struct {
	Checked    int64   `json:"checked"`       // reads checked
	Superseded []int64 `json:"superseded"`    // reads of a superseded version within the bound, by age: <=1ms, <=5ms, <=25ms, <=100ms, <=bound
	Violations int64   `json:"violations"`    // reads of a version superseded more than the bound before they began
	MaxAge     int64   `json:"max_age_ns"`    // the oldest supersession a read within the bound returned
	Errors     int64   `json:"check_errors"`  // checks that could not read the records
	Lost       int64   `json:"tracking_lost"` // "tracking connection lost" logged by this worker's caches
	Off        int64   `json:"near_off"`      // "near cache off" logged (the server refused tracking)
}

func (c *coherence) report() coherenceReport {
	r := coherenceReport{Checked: c.checked.Load(), Violations: c.violation.Load(), MaxAge: c.maxAge.Load(), Errors: c.errs.Load()}
	for i := range c.ages {
		r.Superseded = append(r.Superseded, c.ages[i].Load())
	}
	return r
}

// add adds o to r (for the summary).
func (r coherenceReport) add(o coherenceReport) coherenceReport {
	r.Checked += o.Checked
	r.Violations += o.Violations
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
func (w *worker) checkRead(ctx context.Context, op string, k int, ver int64, began time.Time) {
	c := &w.coh
	c.checked.Add(1)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	// The first Deletes after ver: in version order, which is nearly the
	// order they returned in.
	zs, err := w.direct.ZRangeByScoreWithScores(ctx, histKey(w.cfg.Prefix, k), &redis.ZRangeBy{
		Min: "(" + strconv.FormatInt(ver, 10), Max: "+inf", Count: 64}).Result()
	if err != nil {
		c.errs.Add(1)
		return
	}
	first, by := int64(-1), int64(0)
	for _, z := range zs {
		t, err := strconv.ParseInt(z.Member.(string), 10, 64)
		if err != nil || t > began.UnixNano() {
			continue
		}
		if first < 0 || t < first {
			first, by = t, int64(z.Score)
		}
	}
	if first < 0 {
		return // nothing superseded ver before the read began
	}
	age := time.Duration(began.UnixNano() - first)
	if age > w.cfg.Bound {
		c.violation.Add(1)
		// Where did it come from? The server's value now, over the
		// direct client: the same old version there is a stale set.
		held := "?"
		if raw, err := w.direct.Get(ctx, namespace(w.cfg.Prefix)+":{"+cacheKey(k)+"}").Bytes(); err == nil {
			held = describe(raw)
		} else if err == redis.Nil {
			held = "nothing"
		}
		w.sample(fmt.Sprintf("%s (near %v): %s(%s) began %v after the Delete that followed version %d returned (bound %v) and returned version %d; the server holds %s now",
			w.name(), w.cfg.Near, op, cacheKey(k), age.Round(time.Microsecond), by, w.cfg.Bound, ver, held))
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
