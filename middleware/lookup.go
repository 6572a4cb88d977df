package middleware

import (
	"context"
	"errors"
	"net/http"
	"slices"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/engine"
)

// place is where a request for base looks, as far as this process
// knows: base's key itself, or, for a response with Vary, the variant's
// key in base's generation gen of the Vary names vary (see vary.go).
type place struct {
	base, key string
	vary      []string
	gen       uint64
}

// placeOf is where a request r for base looks now (see varyIndex).
func (m *Middleware) placeOf(base string, r *http.Request) place {
	vary, gen := m.vary.get(base)
	at := place{base: base, key: base, vary: vary, gen: gen}
	if len(vary) > 0 {
		at.key = variantKey(generationBase(base, gen), vary, r)
	}
	return at
}

// exchange is one request on its way through serve: what each step of
// answering it through the cache needs.
type exchange struct {
	w     http.ResponseWriter
	r     *http.Request
	next  http.Handler
	route string   // r's Event.Route
	seen  []tagRef // the epochs of the tags of a purged page r found, for its render (see registerTags)

	at place // where the look in progress looks: at.base is r's base key (see baseKey)

	// onlyIfCached: r says only-if-cached (RFC 9111 5.2.1.7): it is
	// answered from storage or with a 504, never by a render.
	onlyIfCached bool
}

// fwd is the Cache-Status fwd of a render for x.r: uri-miss, or vary-miss
// when its URL has a stored response with Vary.
func (x *exchange) fwd() string {
	if len(x.at.vary) > 0 {
		return "vary-miss"
	}
	return "uri-miss"
}

// peeked is what a look under a key found (see find).
type peeked struct {
	resp    response
	err     error        // the cache's answer: nil, cache.ErrStale with resp, or why there is no resp
	found   engine.Found // counts the look in the cache's Stats, once r is answered from it
	counted bool         // GetOrLoad counted r already: the look must not count again
}

// find reads key, r's key for base with the Vary names vary of the
// generation gen (base itself when vary is empty), and, with vary, base's
// marker alongside it (see generationBase): in parallel, so a variant's
// hit waits for no more round trips than a plain one (with the near
// cache on, both are answered in the process). Neither read counts in
// the cache's Stats (see engine.View.Peek): key's does through
// peeked.found, once it answers r; the marker's never does.
//
// current is false when what r looked under is not the base's current
// generation: the marker names other Vary names or another generation,
// or there is none (a write deleted it, or it expired) for a variant; or
// key is base and holds a marker. The index then holds what the marker
// says (nothing, without one), and r looks again. A failed read of the
// marker leaves the index as it is.
func (m *Middleware) find(ctx context.Context, at place) (p peeked, current bool) {
	base, key, vary, gen := at.base, at.key, at.vary, at.gen
	if len(vary) == 0 {
		p.resp, p.found, p.err = engine.Peek[response](ctx, m.e, key)
		if (p.err == nil || errors.Is(p.err, cache.ErrStale)) && p.resp.marker() {
			m.vary.put(base, p.resp.Vary, p.resp.Version)
			return p, false
		}
		return p, true
	}
	type read struct {
		mk  response
		err error
	}
	marker := make(chan read, 1)
	go func() {
		mk, _, err := engine.Peek[response](ctx, m.e, base)
		marker <- read{mk, err}
	}()
	p.resp, p.found, p.err = engine.Peek[response](ctx, m.e, key)
	mr := <-marker
	switch {
	case mr.err == nil, errors.Is(mr.err, cache.ErrStale), errors.Is(mr.err, cache.ErrMiss):
	default:
		// The server failed to answer for the marker: what the index
		// says stands for this request (a write's Delete of the marker
		// fails as well), as the variant's read has failed or not.
		return p, true
	}
	if !mr.mk.marker() {
		m.vary.put(base, nil, 0)
		return p, false
	}
	if mr.mk.Version != gen || !slices.Equal(mr.mk.Vary, vary) {
		m.vary.put(base, mr.mk.Vary, mr.mk.Version)
		return p, false
	}
	return p, true
}
