package middleware

import (
	"context"
	"errors"

	"github.com/hotkv/stampede/cache"
)

// The one rule between purges and renders: a purge by URL (PurgeURL, a
// PURGE), a write's invalidation (a POST's) and a tag purge (PurgeTag)
// win over every render that began before them, in every process, at
// every exit a render has:
//
//	exit                                  how the purge wins
//	stored by the load (GetOrLoad)        the cache's claim: a Delete removes it, the write is a no-op
//	stored by a revalidation              SetIfUnchanged of the entry the look read before the render (storeRevalidated)
//	stored by a client's no-cache render  SetIfUnchanged of the entry read before the render (renderAndStore)
//	stored in a new generation (Vary)     the marker is written only if unchanged (toStore, moveGeneration)
//	tags of any stored render             registerTags: another epoch, or a lost record, since the render began
//	shared with waiters                   the waiters get only what was stored, or the load's retry (retryPurged)
//	stored response in place of a failure holds, asked before it answers (render, revalidate)
//
// holds is the last row's check: a stored response answers only while
// the cache still serves it. A soft purge wins in the same places (and
// never over a hard one): its table is in softpurge.go.

// holds reports whether prior is still what the cache serves for x, as
// far as the server says now: x's key in the generation x looked in
// holds prior (its Version; a purge or a write deleted it, or the base's
// marker, or a render replaced it, otherwise), and no tag of prior was
// purged since its render. A read that fails proves nothing: false.
func (m *Middleware) holds(ctx context.Context, x *exchange, prior *response) bool {
	if x == nil || x.at.key == "" {
		return false
	}
	p, current := m.find(ctx, x.at)
	return current && (p.err == nil || errors.Is(p.err, cache.ErrStale)) &&
		p.resp.Version == prior.Version && m.live(ctx, &p.resp)
}
