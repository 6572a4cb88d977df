package middleware

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/engine"
	"github.com/hotkv/stampede/internal/failpoint"
)

// This file holds soft purges (SoftPurgeURL, SoftPurgeTag, a PURGE with
// "Fastly-Soft-Purge: 1"): a page is marked stale, not removed. The next
// request in any process is answered with it at once, as with any stale
// page, while one render in the cluster refreshes it, conditionally when
// it has validators (see revalidate.go); Freshness.StaleIfError keeps it
// answering when that render fails. A purge of a whole busy site thus
// costs one cheap revalidation per page, not an avalanche of renders.
//
// The page's cache entry is made stale (cache.(*Cache).SoftInvalidate,
// engine.View.MarkStale): the cache reads it stale while the response's
// own lifetime (response.FreshUntil) has not ended. That is how a reader
// tells a soft-purged page (softPurged). Every revalidation stores only
// over the very entry its look read (see revalidate), so one that began
// before a soft purge, which rewrites the entry, is dropped.
//
// The rule for a response that forbids serving it stale
// (must-revalidate, proxy-revalidate, no-cache, s-maxage in a shared
// cache, or simply no stale window: response.staleWindow is 0): once
// soft-purged it is never served without a revalidation. Requests for it
// wait for the one revalidation in the cluster, as for a response kept
// past its stale window (fromStored), and are answered with its result;
// within the response's grace (Freshness.StaleIfError, which such
// responses rarely have) a failed revalidation answers with it. A page
// stored before soft purges existed has no StaleWindow: it is taken to
// forbid it unless its RevalidateFrom says otherwise.
//
// A page with Vary: its variants live under keys the base's marker
// names (see generationBase), which a soft purge by URL cannot reach
// one by one; such a soft purge deletes the marker, as PurgeURL does.
// Tags reach every variant (each stored page names its tags' epochs).
//
// What happens to a page after a soft purge, by the state it is in:
//
//	page's state                 a reader                                   a waiter                                   a hard purge, or a write's invalidation, meanwhile
//	stored, fresh                serves it stale, starts the one refresh    -                                          deletes it (URL) or differs in a hard epoch (tag): never served again, rendered as a miss
//	stored, forbids stale        waits for the one revalidation             answered with what the revalidation stored  as above; the revalidation's write is conditional on the entry read and is dropped
//	being refreshed              serves it stale                            -                                          as above; the refresh's write is conditional on the old entry and is dropped
//	being revalidated (kept)     waits for a revalidation of its own        told to read again when that one is dropped  as above; the revalidation stores only over the entry its look read before the render
//	claimed (a miss's render)    the claim is deleted: renders as a miss    told to read again; shares the next render  as on a hard purge
//	Vary (by URL)                the marker is gone: renders as a miss      shares that render                         as on a hard purge
//	tag soft-purged, not marked  marks it stale (once: conditional), as above                                               a hard epoch differs: dropped, as on a hard purge
//	render begun before the soft purge  -                                   gets the render's answer                   its page is stored stale at once (tags: the soft epoch known before it; URL: its conditional write fails)
//
// A soft purge never undoes a hard one: a hard purge deletes the page or
// draws a new hard epoch, and a soft purge only marks what is stored; a
// hard purge after a soft one finds the page stale, and deletes it all
// the same.

// SoftPurgeURL marks the stored page of a GET of rawURL stale, in every
// process, near caches included: from its return on, the next request
// for it is answered with it at once, stale, while one render in the
// cluster revalidates it (with its ETag or Last-Modified when it has
// them), and a render that was running meanwhile is not stored as fresh.
// A page whose response forbids serving it stale (must-revalidate and
// the like) is not served again before that revalidation: requests wait
// for it. A page with Vary is purged as PurgeURL purges it (its variants
// render again). rawURL, h and the keys are PurgeURL's, and so are its
// errors.
func (m *Middleware) SoftPurgeURL(ctx context.Context, rawURL string, h http.Header) error {
	keys, err := m.urlKeys(ctx, "SoftPurgeURL", rawURL, h)
	if err != nil {
		return err
	}
	failpoint.Inject(ctx, failpoint.MiddlewarePurge)
	if err := m.softAll(ctx, keys); err != nil {
		return fmt.Errorf("middleware: soft purge %q: %w", rawURL, err)
	}
	return nil
}

// softAll marks the pages under keys stale (cache.SoftInvalidate: a
// read, the conditional writes, the deletes: three round trips for all),
// then deletes the keys that hold a marker (a page with Vary), whose
// variants a stale marker would not make stale, concurrently.
func (m *Middleware) softAll(ctx context.Context, keys []string) error {
	if err := m.c.SoftInvalidate(ctx, keys...); err != nil {
		return err
	}
	errs := make([]error, len(keys))
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Go(func() {
			mk, _, err := engine.Peek[response](ctx, m.e, k) // not counted: the check of a purge
			switch {
			case err != nil && !errors.Is(err, cache.ErrStale) && !errors.Is(err, cache.ErrMiss):
				errs[i] = err
			case err == nil || errors.Is(err, cache.ErrStale):
				if mk.marker() {
					errs[i] = m.c.Delete(ctx, k)
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// softRounds bounds the conditional writes of a tag's record that other
// purges keep overtaking; then the tag is purged hard.
const softRounds = 3

// SoftPurgeTag marks every page tagged with one of tags stale (see
// Options.Tags), every Vary variant included, in every process: from
// its return on, the next request for each such page is answered with it
// at once, stale, while one render in the cluster revalidates it, as
// after SoftPurgeURL (and a page that forbids serving stale waits for
// that revalidation); a render that was running meanwhile is stored
// stale. Each tag costs a read and one conditional write of its record
// (a new soft epoch, the hard one kept), however many pages it has; the
// first request for each page marks it stale. A tag whose record other
// purges keep changing is purged as PurgeTag does. It returns an error
// naming each tag it could not purge; those purged before it stand.
func (m *Middleware) SoftPurgeTag(ctx context.Context, tags ...string) error {
	for _, t := range tags {
		if why := validTag(t); why != "" {
			return invalid("SoftPurgeTag: %s", why)
		}
	}
	var errs []error
	failpoint.Inject(ctx, failpoint.MiddlewarePurge)
	for _, t := range tags {
		if err := m.softPurgeTag(ctx, t); err != nil {
			errs = append(errs, fmt.Errorf("middleware: soft purge tag %q: %w", t, err))
		}
	}
	return errors.Join(errs...)
}

// softPurgeTag draws a new soft epoch for tag's record, keeping its hard
// epoch, if the record is unchanged since it was read (a hard purge
// meanwhile must not be undone); with no record (every page naming the
// tag reads as purged already) it makes one, so that a render running
// now stores its page stale (see registerTags).
func (m *Middleware) softPurgeTag(ctx context.Context, tag string) error {
	key := tagKey(tag)
	for range softRounds {
		now := m.now().UnixMilli()
		st, found, err := engine.Peek[tagStamp](ctx, m.e, key)
		switch {
		case errors.Is(err, cache.ErrMiss):
			st := tagStamp{Epoch: rand.Uint64(), Soft: rand.Uint64(), SoftAt: now}
			return cache.Set(ctx, m.c, key, st, cache.WithExpiry(cache.Expiry{Fresh: m.tagLife}))
		case err != nil && !errors.Is(err, cache.ErrStale):
			return err
		}
		st.Soft, st.SoftAt = rand.Uint64(), now
		err = m.e.SetIfUnchanged(ctx, key, st, found.Raw, m.tagLife, 0)
		if !errors.Is(err, engine.ErrChanged) {
			return err
		}
	}
	return m.PurgeTag(ctx, tag)
}

// softPurged reports whether p, a look's find, is a soft-purged page:
// the cache reads it stale while the response's own lifetime has not
// ended.
func (m *Middleware) softPurged(p *peeked) bool {
	return errors.Is(p.err, cache.ErrStale) && p.resp.fresh(m.now())
}

// waitsSoft reports whether p is a soft-purged page that may not be
// served stale (see the rule at the top of this file): it is answered
// only after a revalidation.
func (m *Middleware) waitsSoft(p *peeked) bool {
	return m.softPurged(p) && p.resp.staleWindow() <= 0
}

// staleWindow is how long (ms) resp may be served stale past its
// freshness: StaleWindow, or for a response kept to be revalidated
// (stored before StaleWindow existed too) what its RevalidateFrom says.
func (resp *response) staleWindow() int64 {
	if resp.RevalidateFrom != 0 {
		return resp.RevalidateFrom - resp.FreshUntil
	}
	return resp.StaleWindow
}

// markStale marks p, found fresh under key with a soft-purged tag, stale
// if key still holds it: once in the cluster, since the marked entry
// reads stale. A failure is logged; the page is then looked at again.
func (m *Middleware) markStale(ctx context.Context, key string, p *peeked) {
	err := m.e.MarkStale(ctx, key, p.found.Raw)
	if err != nil && !errors.Is(err, engine.ErrChanged) && m.o.Logger != nil {
		m.o.Logger.Warn("middleware: marking a soft-purged page stale failed", "err", err)
	}
}

// softPurgeField is the field of a PURGE that asks for a soft purge, as
// Fastly takes it.
const softPurgeField = "Fastly-Soft-Purge"

// softPurgeAsked reports whether a PURGE with header h asks for a soft
// purge: exactly one Fastly-Soft-Purge field line, "1" (soft) or "0"
// (hard), or none (hard); anything else is why the PURGE is refused.
func softPurgeAsked(h http.Header) (soft bool, why string) {
	vs, ok := h[softPurgeField]
	switch {
	case !ok:
		return false, ""
	case len(vs) != 1:
		return false, softPurgeField + ": more than one field line"
	case vs[0] == "1":
		return true, ""
	case vs[0] == "0":
		return false, ""
	}
	return false, softPurgeField + ": neither 1 nor 0"
}
