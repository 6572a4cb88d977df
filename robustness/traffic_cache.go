// This file holds the cache traffic: GetOrLoad, GetOrLoadMany, Get, Set and
// Delete on two namespaces. lin's values live an hour and no process has a
// near cache for it, so its history must be linearizable; exp's expire and
// go stale within a second, and half the processes read it through a near
// cache. exp's values carry tags (expTags: every call gives a key's own
// tags, a batch the union of its keys'), and InvalidateTag and
// SoftInvalidateTag of one tag are among its operations. Loaders succeed,
// fail, panic, outlive LoadTimeout and (in exp) find nothing; every value
// is unique, so a read names the write it saw.

package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/loader"
)

func (w *worker) linTraffic(ctx context.Context, r *rand.Rand) {
	w.cacheTraffic(ctx, r, "lin", w.lin, linKeys)
}

func (w *worker) expTraffic(ctx context.Context, r *rand.Rand) {
	w.cacheTraffic(ctx, r, "exp", w.exp, expKeys)
}

func (w *worker) cacheTraffic(ctx context.Context, r *rand.Rand, ns string, c *cache.Cache, keys int) {
	near := ns == "exp" && w.cfg.Near
	key := func() string { return fmt.Sprintf("%s%d", ns[:1], r.IntN(keys)) }
	for pause(ctx, time.Duration(r.IntN(15))*time.Millisecond) {
		octx, cancel := context.WithTimeout(ctx, opTimeout)
		if ns == "exp" && r.IntN(100) < w.cfg.Mix.Invalidate {
			// Three in five hard, of a group's tag or a key's own.
			w.invalidate(octx, near, c, expTag(r), r.IntN(5) < 3)
			cancel()
			continue
		}
		switch p := r.IntN(100); {
		case p < 35:
			w.getOrLoad(octx, r, ns, near, c, key())
		case p < 45:
			n := 2 + r.IntN(3)
			ks := make([]string, 0, n)
			for range n {
				ks = append(ks, key())
			}
			w.getMany(octx, r, ns, near, c, ks)
		case p < 65:
			ctx, info, rec := w.begin(octx, Record{Kind: kGet, NS: ns, Near: near, Key: key()})
			v, err := cache.Get[string](ctx, c, rec.Key)
			if err == nil || errors.Is(err, cache.ErrStale) {
				// A stale value is a value read (ErrKind "stale").
				var perr error
				rec.Value, perr = readValue(v)
				err = errors.Join(err, perr)
			}
			w.end(info, rec, err)
		case p < 82:
			// The value is on file with the start, before anything is
			// sent: a process that dies during the Set leaves it known.
			v := w.value("S", w.rec.nextID(), r)
			name, _ := readValue(v)
			ctx, info, rec := w.begin(octx, Record{Kind: kSet, NS: ns, Near: near, Key: key(), Value: name})
			w.end(info, rec, cache.Set(ctx, c, rec.Key, v, tagsOf(ns, rec.Key)))
		case p < 82+w.cfg.Mix.Garbage && ns == "exp":
			// Bytes the cache cannot decode: the replace path (take the
			// rebuild lock beside the entry, load, write if unchanged).
			// Each write's bytes are its own: a write "if unchanged"
			// cannot tell the same bytes written again (ABA).
			_, info, rec := w.begin(octx, Record{Kind: kGarbage, NS: ns, Key: key()})
			k := fmt.Sprintf("%s:exp:{%s}", w.cfg.Prefix, rec.Key)
			w.end(info, rec, w.raw.Set(octx, k, fmt.Sprintf("\xff\xfegarbage %s %d", w.cfg.Proc, info.id), expTTL+expStale).Err())
		default:
			ctx, info, rec := w.begin(octx, Record{Kind: kDelete, NS: ns, Near: near, Key: key()})
			if w.cfg.sabotaged("stale") && info.id%4 == 0 {
				w.end(info, rec, nil) // sabotage: a Delete that says it happened and did not
				break
			}
			w.end(info, rec, c.Delete(ctx, rec.Key))
		}
		cancel()
	}
}

func (w *worker) getOrLoad(ctx context.Context, r *rand.Rand, ns string, near bool, c *cache.Cache, key string) {
	ctx, info, rec := w.begin(ctx, Record{Kind: kGetOrLoad, NS: ns, Near: near, Key: key})
	behaviour := w.behaviour(r, ns)
	v, err := cache.GetOrLoad(ctx, c, key, func(lctx context.Context) (string, error) {
		vs, err := w.load(lctx, ns, []string{key}, behaviour, r)
		return vs[key], err
	}, tagsOf(ns, key))
	if errors.Is(err, cache.ErrRemoteLoad) && w.cfg.sabotaged("waiter") {
		// Sabotage: a waiter that heard of another process's failure
		// runs the loader itself.
		var vs map[string]string
		if vs, err = w.load(ctx, ns, []string{key}, bOK, r); err == nil {
			v = vs[key]
		}
	}
	if err == nil {
		rec.Value, err = readValue(v)
	}
	w.end(info, rec, err)
}

func (w *worker) getMany(ctx context.Context, r *rand.Rand, ns string, near bool, c *cache.Cache, keys []string) {
	ctx, info, rec := w.begin(ctx, Record{Kind: kGetMany, NS: ns, Near: near, Keys: keys})
	behaviour := w.behaviour(r, ns)
	vs, err := cache.GetOrLoadMany(ctx, c, keys, func(lctx context.Context, keys []string) (map[string]string, error) {
		return w.load(lctx, ns, keys, behaviour, r)
	}, tagsOf(ns, keys...))
	rec.Values = map[string]string{}
	for k, v := range vs {
		name, perr := readValue(v)
		rec.Values[k] = name
		if perr != nil {
			err = errors.Join(err, perr)
		}
	}
	var be *cache.BatchError
	if errors.As(err, &be) {
		// The keys that failed, each with its error's kind, go in Detail;
		// the Err is the whole error.
		rec.Detail = batchDetail(be)
	}
	w.end(info, rec, err)
}

// invalidate invalidates tag, hard or softly, recording it as an operation
// whose Key is the tag.
func (w *worker) invalidate(ctx context.Context, near bool, c *cache.Cache, tag string, hard bool) {
	kind := kSoftInvalidateTag
	if hard {
		kind = kInvalidateTag
	}
	ctx, info, rec := w.begin(ctx, Record{Kind: kind, NS: "exp", Near: near, Key: tag})
	switch {
	case hard && w.cfg.sabotaged("tags") && info.id%2 == 0:
		w.end(info, rec, nil) // sabotage: an InvalidateTag that says it happened and did not
	case hard:
		w.end(info, rec, c.InvalidateTag(ctx, tag))
	case w.cfg.sabotaged("softtags"):
		w.end(info, rec, nil) // sabotage: a SoftInvalidateTag that says it happened and did not
	default:
		w.end(info, rec, c.SoftInvalidateTag(ctx, tag))
	}
}

// Tags of exp: key "e<i>" has the group tag "g<i%3>" and its own tag
// "k<i>". Every GetOrLoad and Set of a key gives its tags, and a
// GetOrLoadMany the union of its keys' (a value then carries its
// batch-mates' tags too): a key's own tags are on every value of it,
// which is what the invalidate check relies on.
const expGroups = 3

// expTags returns the tags of an exp key, or nil for a key of another
// namespace.
func expTags(key string) []string {
	n, err := strconv.Atoi(strings.TrimPrefix(key, "e"))
	if err != nil || !strings.HasPrefix(key, "e") {
		return nil
	}
	return []string{fmt.Sprintf("g%d", n%expGroups), fmt.Sprintf("k%d", n)}
}

// expTag draws the tag an invalidation names: a group's or a key's, as
// often.
func expTag(r *rand.Rand) string {
	if r.IntN(2) == 0 {
		return fmt.Sprintf("g%d", r.IntN(expGroups))
	}
	return fmt.Sprintf("k%d", r.IntN(expKeys))
}

// tagsOf is the option giving a call on keys of ns their tags (the union,
// each once): none outside exp.
func tagsOf(ns string, keys ...string) cache.Option {
	var tags []string
	if ns == "exp" {
		for _, k := range keys {
			for _, t := range expTags(k) {
				if !slices.Contains(tags, t) {
					tags = append(tags, t)
				}
			}
		}
	}
	return cache.WithTags(tags...)
}

func batchDetail(be *cache.BatchError) string {
	var b strings.Builder
	for k, err := range be.Errors {
		fmt.Fprintf(&b, "%s=%s;", k, errKind(err))
	}
	return b.String()
}

// Loader behaviours, drawn once per operation (the rand is the
// goroutine's, and the loader may run in another goroutine).
const (
	bOK = iota
	bFail
	bPanic
	bSlow // outlives LoadTimeout
	bNotFound
)

func (w *worker) behaviour(r *rand.Rand, ns string) int {
	fail := w.cfg.Mix.Fail
	switch p := r.IntN(100); {
	case p < fail:
		return bFail
	case p < fail+fail/4:
		return bPanic
	case p < fail+fail/2:
		return bSlow
	case p < fail+fail/2+10 && ns == "exp":
		return bNotFound
	}
	return bOK
}

// load is every loader: it records the run, with the operation whose
// context it got, and does what behaviour says.
func (w *worker) load(ctx context.Context, ns string, keys []string, behaviour int, r *rand.Rand) (map[string]string, error) {
	id := w.rec.nextID()
	rec := Record{Kind: kLoad, ID: id, NS: ns, Keys: keys, Call: now()}
	if info := infoOf(ctx); info != nil {
		rec.Op = info.id
	}
	w.rec.write(rec)
	// The operation's rand is not safe to share: draw from a fresh one.
	lr := rand.New(rand.NewPCG(w.cfg.Seed^uint64(id), uint64(id)))
	_ = r
	done := func(vs map[string]string, err error) (map[string]string, error) {
		rec.Return = now()
		if err != nil {
			rec.Err, rec.ErrKind = err.Error(), errKind(err)
		}
		if len(vs) > 0 {
			rec.Values = map[string]string{}
			for k, v := range vs {
				rec.Values[k], _ = readValue(v)
			}
		}
		w.rec.write(rec)
		return vs, err
	}
	if !pause(ctx, time.Duration(lr.IntN(30))*time.Millisecond) {
		return done(nil, ctx.Err())
	}
	switch behaviour {
	case bFail:
		return done(nil, fmt.Errorf("the loader failed (F.%s.%d)", w.cfg.Proc, id))
	case bPanic:
		rec.Return, rec.Err, rec.ErrKind = now(), fmt.Sprintf("P.%s.%d", w.cfg.Proc, id), "panic"
		w.rec.write(rec)
		panic(fmt.Sprintf("the loader panicked (P.%s.%d)", w.cfg.Proc, id))
	case bSlow:
		<-ctx.Done() // LoadTimeout ends it
		return done(nil, ctx.Err())
	case bNotFound:
		return done(nil, loader.ErrNotFound)
	}
	vs := make(map[string]string, len(keys))
	for i, k := range keys {
		vs[k] = w.value("L", id*100+int64(i), lr)
	}
	return done(vs, nil)
}
