package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/redis/go-redis/v9"
)

// A worker's side of the tag measurement (tags.go). Keys are "t<i>",
// key i stored with the tag "tag<i mod tags>"; a value is "g<gen>:"
// padded to the run's value size, gen 0 as first written, gen+1 as a
// refresh after a soft invalidation loads it.

// tagWorker is what a worker keeps for the tag measurement. Its fields
// are safe for concurrent use: the command loop, a running poll and the
// Cache's refreshes use them.
type tagWorker struct {
	rt    roundTrips
	loads atomic.Int64 // loader calls of the soft rounds, since topen

	mu   sync.Mutex    // guards gate
	gate chan struct{} // soft rounds: the loaders wait for it to close

	softBase atomic.Uint64 // soft rounds: the near cache's invalidations before the call (tsoftarm)
}

// roundTrips is a go-redis hook that counts what the Cache sends through
// the client it was given: a single command or a pipeline is one round
// trip to a single server. (The near cache's reader and tracking
// connections are its own, and not seen here: fills and pings.)
type roundTrips struct {
	calls, cmds atomic.Int64
}

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.calls.Add(1)
		h.cmds.Add(1)
		return next(ctx, cmd)
	}
}

func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.calls.Add(1)
		h.cmds.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

func tagName(t int) string { return "tag" + strconv.Itoa(t) }
func tagKey(i int) string  { return "t" + strconv.Itoa(i) }

// tagKeys returns the keys of tag t among keys keys spread over tags tags.
func tagKeys(t, keys, tags int) []string {
	var out []string
	for i := t; i < keys; i += tags {
		out = append(out, tagKey(i))
	}
	return out
}

// genValue is the value of generation gen, padded to size bytes.
func genValue(gen, size int) string {
	v := "g" + strconv.Itoa(gen) + ":"
	if len(v) < size {
		v += strings.Repeat("x", size-len(v))
	}
	return v
}

// softRead is what a reader reports of its reads after a soft
// invalidation, its loaders held back.
type softRead struct {
	Calls, Old, New, Errs int
	FirstErr              string `json:",omitempty"`
	Waits, StaleHits      int64  // the Cache's Stats deltas over the reads
	Hits, Misses, Near    int64
	Told                  int64 // Unix ns: when the reader saw its near cache told of the call

	Lat []int64
}

// tagCommand runs f if it is a command of the tag measurement; ok is false
// for any other command.
func (w *worker) tagCommand(ctx context.Context, f []string) (ok bool, err error) {
	arg := func(i int) int {
		if i >= len(f) {
			return -1
		}
		n, err := strconv.Atoi(f[i])
		if err != nil {
			return -1
		}
		return n
	}
	if f[0] == "topen" { // topen <namespace> <near max entries> <value bytes>
		tw := &tagWorker{}
		o := &cache.Options{Namespace: f[1], Expiry: cache.ExpiryPolicy{Fresh: time.Hour, Stale: time.Hour},
			Near: &cache.Near{MaxEntries: arg(2)}}
		if err := w.openWith(ctx, o, arg(3), &tw.rt); err != nil {
			return true, err
		}
		w.tag = tw
		w.say("ready")
		return true, nil
	}
	switch f[0] {
	case "tfill", "thold", "tarm", "top", "tsoftarm", "tsoftread", "tsoftsettle", "tloads", "twatch":
	default:
		return false, nil
	}
	if w.c == nil || w.tag == nil {
		return true, fmt.Errorf("%s: no Cache open for tags (topen)", f[0])
	}
	switch f[0] {
	case "tfill": // tfill <keys> <tags>: Set every key, generation 0, with its tag
		err = w.tagFill(ctx, arg(1), arg(2))
		if err == nil {
			w.say("filled")
		}
	case "thold": // thold <keys> <tags> <tag to leave out, -1: none>
		var held, near, loads int
		held, near, loads, err = w.tagHold(ctx, arg(1), arg(2), arg(3))
		if err == nil {
			w.say("held %d %d %d", held, near, loads)
		}
	case "tarm": // tarm <round> <key> <sweep tag, -1: none> <keys> <tags> <pace ns>
		err = w.tagArm(ctx, arg(1), f[2], arg(3), arg(4), arg(5), time.Duration(arg(6)))
	case "top": // top <inval|soft|set> <tag or key> <gen>
		w.tagOp(ctx, f[1], f[2], arg(3))
	case "tsoftarm":
		w.tag.softBase.Store(w.c.Stats().NearInvalidations)
		w.say("softarmed")
	case "tsoftread": // tsoftread <tag> <keys> <tags> <gen> <pace ns>
		var r softRead
		r, err = w.tagSoftRead(ctx, arg(1), arg(2), arg(3), arg(4), time.Duration(arg(5)))
		if err == nil {
			b, _ := json.Marshal(r)
			w.say("softread %s", b)
		}
	case "tsoftsettle": // tsoftsettle <tag> <keys> <tags> <gen>
		err = w.tagSoftSettle(ctx, arg(1), arg(2), arg(3), arg(4))
	case "tloads":
		w.say("loads %d", w.tag.loads.Load())
	case "twatch": // twatch <key> <pace ns>
		err = w.tagWatch(ctx, f[1], time.Duration(arg(2)))
	}
	return true, err
}

// tagFill writes every key at generation 0 with its tag, 16 at a time.
func (w *worker) tagFill(ctx context.Context, keys, tags int) error {
	errs := make([]error, 16)
	var wg sync.WaitGroup
	for g := range errs {
		wg.Go(func() {
			for i := g; i < keys && errs[g] == nil; i += len(errs) {
				errs[g] = cache.Set(ctx, w.c, tagKey(i), genValue(0, len(w.value)), cache.WithTags(tagName(i%tags)))
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// tagHold reads the keys of every tag but skip into the near cache, one
// GetOrLoadMany per tag, then reads each again: near is how many of those
// the near cache answered, loads how many loader calls the first pass made
// (0 after tfill).
func (w *worker) tagHold(ctx context.Context, keys, tags, skip int) (held, near, loads int, err error) {
	var all []string
	for t := range tags {
		if t == skip {
			continue
		}
		ks := tagKeys(t, keys, tags)
		_, err := cache.GetOrLoadMany(ctx, w.c, ks, func(_ context.Context, miss []string) (map[string]string, error) {
			loads += len(miss)
			out := make(map[string]string, len(miss))
			for _, k := range miss {
				out[k] = genValue(0, len(w.value))
			}
			return out, nil
		}, cache.WithTags(tagName(t)))
		if err != nil {
			return 0, 0, 0, fmt.Errorf("hold %s: %w", tagName(t), err)
		}
		all = append(all, ks...)
	}
	before := w.c.Stats().NearHits
	for _, k := range all {
		if _, err := cache.Get[string](ctx, w.c, k); err != nil {
			return 0, 0, 0, fmt.Errorf("hold %s: second read: %w", k, err)
		}
	}
	return len(all), int(w.c.Stats().NearHits - before), loads, nil
}

// readNear reads key until the near cache answers it (at most 100 reads:
// the first from the server fills it), loading it again if it was
// invalidated (with its tag, if t >= 0). It returns the value.
func (w *worker) readNear(ctx context.Context, key string, t int) (string, error) {
	for range 100 {
		before := w.c.Stats().NearHits
		v, err := cache.Get[string](ctx, w.c, key)
		switch {
		case errors.Is(err, cache.ErrMiss):
			var opts []cache.LoadOption
			if t >= 0 {
				opts = append(opts, cache.WithTags(tagName(t)))
			}
			if _, err := cache.GetOrLoad(ctx, w.c, key, func(context.Context) (string, error) {
				return genValue(0, len(w.value)), nil
			}, opts...); err != nil {
				return "", fmt.Errorf("reload %s: %w", key, err)
			}
			continue
		case err != nil:
			return "", fmt.Errorf("read %s: %w", key, err)
		}
		if w.c.Stats().NearHits > before {
			return v, nil
		}
	}
	return "", fmt.Errorf("%s: the near cache did not answer in 100 reads", key)
}

// tagArm reads key until its near cache serves it, says "armed", then
// reads it every pace (0: a tight loop) until the value changes (ErrMiss
// or another value) and says "seen <round> <at ns> <began ns> <near
// before 0|1> <miss|value> <served> <swept>": with sweep >= 0 it then
// reads every key of tag sweep once, and served is how many of them were
// answered with a value (after a hard invalidation: none may be).
func (w *worker) tagArm(ctx context.Context, round int, key string, sweep, keys, tags int, pace time.Duration) error {
	t := -1
	if n, err := strconv.Atoi(strings.TrimPrefix(key, "t")); err == nil && strings.HasPrefix(key, "t") {
		t = n % tags
	}
	old, err := w.readNear(ctx, key, t)
	if err != nil {
		return err
	}
	w.say("armed")
	// Owner: this worker; ends when the change is seen or after a minute.
	go func() {
		deadline := time.Now().Add(time.Minute)
		prevNear := true // readNear's last read came from the near cache
		for {
			n0 := w.c.Stats().NearHits
			began := time.Now()
			v, err := cache.Get[string](ctx, w.c, key)
			at := time.Now()
			kind := ""
			switch {
			case errors.Is(err, cache.ErrMiss):
				kind = "miss"
			case err != nil && !errors.Is(err, cache.ErrStale):
				w.say("error tarm %s: %s", key, strings.ReplaceAll(err.Error(), "\n", " "))
				return
			case v != old:
				kind = "value"
			}
			if kind != "" {
				served, swept := 0, 0
				if sweep >= 0 {
					for _, k := range tagKeys(sweep, keys, tags) {
						_, err := cache.Get[string](ctx, w.c, k)
						if err == nil || errors.Is(err, cache.ErrStale) {
							served++
						}
						swept++
					}
				}
				w.say("seen %d %d %d %d %s %d %d", round, at.UnixNano(), began.UnixNano(), b2i(prevNear), kind, served, swept)
				return
			}
			prevNear = w.c.Stats().NearHits > n0
			if at.After(deadline) {
				w.say("error tarm %s: no change in a minute", key)
				return
			}
			if pace > 0 {
				time.Sleep(pace) // the reader's own pace, not a synchronisation
			}
		}
	}()
	return nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// tagOp runs one invalidation or write and says "op <start ns> <end ns>
// <round trips> <commands> <error>".
func (w *worker) tagOp(ctx context.Context, kind, target string, gen int) {
	calls, cmds := w.tag.rt.calls.Load(), w.tag.rt.cmds.Load()
	start := time.Now()
	var err error
	switch kind {
	case "inval":
		err = w.c.InvalidateTag(ctx, target)
	case "soft":
		err = w.c.SoftInvalidateTag(ctx, target)
	case "set":
		err = cache.Set(ctx, w.c, target, genValue(gen, len(w.value)))
	default:
		err = fmt.Errorf("unknown op %q", kind)
	}
	end := time.Now()
	w.say("op %d %d %d %d %q", start.UnixNano(), end.UnixNano(), w.tag.rt.calls.Load()-calls, w.tag.rt.cmds.Load()-cmds, errText(err))
}

// tagSoftRead waits (reading its count every pace) until the near cache
// was told of the soft invalidation (a drop since tsoftarm: the tag's
// record), then reads every key of tag t once with GetOrLoad: each read
// serves the value stale and starts a refresh, whose loader (in whichever
// process gets the rebuild lock) waits until tsoftsettle. A read that
// waited for that loader would time out (3 s).
func (w *worker) tagSoftRead(ctx context.Context, t, keys, tags, gen int, pace time.Duration) (softRead, error) {
	var r softRead
	for deadline := time.Now().Add(time.Minute); w.c.Stats().NearInvalidations == w.tag.softBase.Load(); {
		if time.Now().After(deadline) {
			return r, errors.New("tsoftread: the near cache was not told of the call in a minute")
		}
		time.Sleep(max(pace, time.Microsecond)) // no signal of a near-cache drop is exposed
	}
	r.Told = time.Now().UnixNano()
	gate := make(chan struct{})
	w.tag.mu.Lock()
	if w.tag.gate != nil {
		close(w.tag.gate)
	}
	w.tag.gate = gate
	w.tag.mu.Unlock()
	load := func(lctx context.Context) (string, error) {
		w.tag.loads.Add(1)
		select {
		case <-gate:
		case <-lctx.Done():
			return "", lctx.Err()
		}
		return genValue(gen+1, len(w.value)), nil
	}
	oldV, newV := genValue(gen, len(w.value)), genValue(gen+1, len(w.value))
	s0 := w.c.Stats()
	for _, k := range tagKeys(t, keys, tags) {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		start := time.Now()
		v, err := cache.GetOrLoad(cctx, w.c, k, load, cache.WithTags(tagName(t)))
		r.Lat = append(r.Lat, time.Since(start).Nanoseconds())
		cancel()
		r.Calls++
		switch {
		case err != nil:
			if r.Errs++; r.FirstErr == "" {
				r.FirstErr = err.Error()
			}
		case v == oldV:
			r.Old++
		case v == newV:
			r.New++
		default:
			if r.Errs++; r.FirstErr == "" {
				r.FirstErr = fmt.Sprintf("%s: unexpected value %.10q", k, v)
			}
		}
	}
	s1 := w.c.Stats()
	r.Waits, r.StaleHits = int64(s1.Waits-s0.Waits), int64(s1.StaleHits-s0.StaleHits)
	r.Hits, r.Misses, r.Near = int64(s1.Hits-s0.Hits), int64(s1.Misses-s0.Misses), int64(s1.NearHits-s0.NearHits)
	return r, nil
}

// tagSoftSettle lets the loaders of tsoftread return, then reads the keys
// of tag t until each holds generation gen+1 (10 s at most) and says
// "settled <loader calls of soft rounds in this process so far>".
func (w *worker) tagSoftSettle(ctx context.Context, t, keys, tags, gen int) error {
	w.tag.mu.Lock()
	if w.tag.gate != nil {
		close(w.tag.gate)
		w.tag.gate = nil
	}
	w.tag.mu.Unlock()
	want := genValue(gen+1, len(w.value))
	deadline := time.Now().Add(10 * time.Second)
	for _, k := range tagKeys(t, keys, tags) {
		for {
			v, err := cache.Get[string](ctx, w.c, k)
			if err == nil && v == want {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("settle %s: still %.10q (%v) after 10s", k, v, err)
			}
			time.Sleep(time.Millisecond) // another process's write: nothing to wait on here
		}
	}
	w.say("settled %d", w.tag.loads.Load())
	return nil
}

// tagWatch says "watching", then waits (reading the near cache's count
// every pace) until its near cache is told of a change, which in the
// bytes phase is the record of the tag being invalidated, and reads key
// once (which reads the record again, so that the server tracks it for
// the next invalidation), saying "told".
func (w *worker) tagWatch(ctx context.Context, key string, pace time.Duration) error {
	base := w.c.Stats().NearInvalidations
	w.say("watching")
	// Owner: this worker; ends when told or after a minute.
	go func() {
		deadline := time.Now().Add(time.Minute)
		for w.c.Stats().NearInvalidations == base {
			if time.Now().After(deadline) {
				w.say("error twatch %s: not told in a minute", key)
				return
			}
			time.Sleep(max(pace, time.Microsecond)) // no signal of a near-cache drop is exposed
		}
		_, err := cache.Get[string](ctx, w.c, key)
		if err != nil && !errors.Is(err, cache.ErrMiss) && !errors.Is(err, cache.ErrStale) {
			w.say("error twatch %s: %s", key, strings.ReplaceAll(err.Error(), "\n", " "))
			return
		}
		w.say("told")
	}()
	return nil
}
