// This file holds the cache traffic: GetOrLoad, GetOrLoadMany, Get, Set and
// Delete on two namespaces. lin's values live an hour and no process has a
// near cache for it, so its history must be linearizable; exp's expire and
// go stale within a second, and half the processes read it through a near
// cache. Loaders succeed, fail, panic, outlive LoadTimeout and (in exp)
// find nothing; every value is unique, so a read names the write it saw.

package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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
			if err == nil {
				rec.Value, err = readValue(v)
			}
			w.end(info, rec, err)
		case p < 82:
			// The value is on file with the start, before anything is
			// sent: a process that dies during the Set leaves it known.
			v := w.value("S", w.rec.nextID(), r)
			name, _ := readValue(v)
			ctx, info, rec := w.begin(octx, Record{Kind: kSet, NS: ns, Near: near, Key: key(), Value: name})
			w.end(info, rec, cache.Set(ctx, c, rec.Key, v))
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
	})
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
	})
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
