package middleware

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/engine"
	"github.com/hotkv/stampede/internal/httprule"
)

// Revalidation (RFC 9111 4.3): a stored response that has a validator of
// the handler's (its ETag, or a Last-Modified) is kept in the cache past
// its freshness and stale window, for a while (httprule.Policy.Keep), so that it can
// be revalidated: the render that refreshes it sends the handler the
// stored validators as If-None-Match and If-Modified-Since, and a 304
// freshens the stored response (its body and status stay, its header
// fields are updated from the 304, its freshness is the 304's) instead
// of the handler making the body again. Any other answer is a new
// response, as without a stored one.
//
// While it is kept past its stale window (response.RevalidateFrom) the
// response is never served without that revalidation: must-revalidate,
// proxy-revalidate and s-maxage hold as before. The cache itself would
// serve it as a stale value from GetOrLoad (its stale window includes the
// time kept) and refresh it in the background; the middleware therefore
// reads it as cache.Get does (engine.Peek) and, finding it kept past its
// stale window, does not ask GetOrLoad for the key but for a revalidation
// key of its own (the key and the stored response's version, see revalidate): one
// request in the cluster claims it and renders, every other request for
// it, in every process, waits for that render as for any miss, then reads
// the freshened response. Within the stale window, the cache's background
// refresh revalidates in the same way, and the cache stores its result.
//
// With RevalidateNoCache a no-cache response with such a validator is
// stored never fresh (FreshUntil is Stored) and kept the same way, so
// every use revalidates it; the requests that come while one does share
// it.
//
// The conditions come from the stored response only: the client's own
// conditional headers never reach a render for the cache (prepareRender),
// and the middleware answers them from the stored response. The request
// sent carries the client's values of the headers the response varies
// on (the render request is the client's), which are the stored
// variant's: the response was found under their key and matched them. A
// 304 only ever freshens the response whose validators were sent, under
// the key it was found at.

// revalidation is a render that refreshes prior: it revalidates it when
// prior has validators of the handler's (always, for a kept response).
type revalidation struct {
	prior *response
	// key is where prior is stored, for a revalidation the middleware
	// stores itself (see storeRevalidated); "" for the cache's stale
	// refresh, whose result the cache stores.
	key string
	// raw is the entry prior was read in (see revalidate and
	// replacePurged), with key: the render stores only over it.
	raw []byte
	// purged: prior was purged (a hard epoch of one of its tags
	// differs); the render is a new one, made without prior's
	// validators, and prior never answers in its place.
	purged bool
}

// conditions sets, in h (a render request's header, without any
// conditional header of the client's), the conditions that revalidate
// prior: If-None-Match with its ETag if the handler made it, and
// If-Modified-Since with its Last-Modified.
func conditions(h http.Header, prior *response) {
	if etag := first(prior.Header, "Etag"); prior.HandlerETag && etag != "" {
		h["If-None-Match"] = []string{etag}
	}
	if lm := first(prior.Header, "Last-Modified"); lm != "" {
		h["If-Modified-Since"] = []string{lm}
	}
}

// freshened is the header of a stored response (stored, canonical and
// read-only) updated with the fields of a 304 answering its revalidation
// (h, merged into canonical names here: the handler's names count in any
// letter case). Every field of h replaces the stored field of that name,
// but those httprule.KeptOnUpdate keeps. A 304 without Date gets the time it was
// received (responded), as storedHeader gives a response, so that the
// stored Date does not make the freshened response look old. The result
// goes through every rule of storable like a new response: a 304 that
// sets a cookie or says private, no-store or no-cache makes it not
// stored.
func freshened(stored, h http.Header, responded time.Time) http.Header {
	canonicalHeader(h)
	out := make(http.Header, len(stored)+len(h))
	for k, vs := range stored {
		out[k] = slices.Clone(vs)
	}
	for k, vs := range h {
		if !httprule.KeptOnUpdate(k) {
			out[k] = slices.Clone(vs)
		}
	}
	if h["Date"] == nil {
		out["Date"] = []string{responded.UTC().Format(http.TimeFormat)}
	}
	return out
}

// renderFailed reports whether err, a revalidation's, says its render
// failed, rather than answered with a response that may not be stored:
// a 5xx (errFailedGraceful), a panic, a render or a wait that outlasted
// its timeout, or a load that failed in another process (which may
// also be an answer not stored there; either way no response came).
func renderFailed(err error) bool {
	var ns errNotStored
	switch {
	case errors.As(err, new(errFailedGraceful)):
		return true
	case errors.As(err, &ns):
		return ns.reason == reasonPanicked || ns.reason == reasonOutlasted
	}
	return errors.Is(err, cache.ErrRemoteLoad) || errors.Is(err, cache.ErrWaitTimeout) || errors.Is(err, context.DeadlineExceeded)
}

// storeRevalidated stores res, the render that revalidated rv.prior (a
// freshened prior, or a new response), where prior is stored (under its
// variant's key for r), and returns what the revalidation key gets: a
// marker (the response's times and Vary, no body), which tells the
// waiters to read the key, for as long as they may wait.
//
// It writes only if the key still holds rv.raw, the very entry prior was
// read in before the render (SET IFEQ, see SetIfUnchanged): a key
// deleted meanwhile (invalidation by a write, in any process), stored
// again by another render, or rewritten stale by a soft purge (which
// keeps the version) stays as it is. The marker then has Version 0 (no
// render's, see overtaken), and is no error: the waiters go back to the
// key and share its next render (see revalidate), rather than each
// render alone. A new response that varies on other headers than prior
// goes under prior's key too (it is served only to requests it
// matches): the base's marker names the Vary that lookups use, until it
// ends (see toStore).
func (m *Middleware) storeRevalidated(ctx context.Context, rv *revalidation, res result) (response, error) {
	err := m.e.SetIfUnchanged(ctx, rv.key, res.resp, rv.raw, max(res.fresh, time.Millisecond), res.stale)
	if err != nil {
		if errors.Is(err, engine.ErrChanged) {
			return m.overtaken(ctx), nil
		}
		return response{}, err
	}
	m.e.Expire(ctx, m.wait, 0)
	return response{Stored: res.resp.Stored, FreshUntil: res.resp.FreshUntil, Vary: res.resp.Vary, Version: res.resp.Version}, nil
}

// endRevalidated deletes rv.prior, kept past its stale window, whose
// revalidation answered with a response that ends it (see httprule.Ends),
// if its key still holds it; otherwise every request would revalidate it
// again, each passing the answer through, and a later render that may be
// stored would have to wait for its version's revalidation key. The
// check and the delete are a round trip apart: a response stored in
// between is deleted too, and rendered again.
func (m *Middleware) endRevalidated(ctx context.Context, rv *revalidation) {
	cur, _, err := engine.Peek[response](ctx, m.e, rv.key) // not counted: the check of a delete
	if (err == nil || errors.Is(err, cache.ErrStale)) && cur.Version == rv.prior.Version {
		_ = m.c.Delete(ctx, rv.key)
	}
}

// overtaken is what the revalidation key gets when the stored response
// changed during its revalidation and nothing was stored: a marker of no
// response (Version 0, which no render draws but with probability
// 2^-64), for as long as its waiters may wait. It tells them to read the
// key again.
func (m *Middleware) overtaken(ctx context.Context) response {
	m.e.Expire(ctx, m.wait, 0)
	return response{}
}
