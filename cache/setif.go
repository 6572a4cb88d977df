package cache

import (
	"context"
	"fmt"
	"time"

	"github.com/hotkv/stampede/internal/peek"
	"github.com/hotkv/stampede/internal/redisx"
)

// setIfUnchanged is Set on a context from peek.Expect (package
// middleware's revalidation): it writes val only if the value key still
// holds old, the entry a Get found, in one conditional write (SET IFEQ,
// or a script where the server has no SET IFEQ), so a Delete or Set that
// came after that Get wins. It returns peek.ErrChanged when the key holds
// something else, or nothing.
func (c *Cache) setIfUnchanged(ctx context.Context, k keys, old, val string, ttl time.Duration) error {
	wrote, err := c.conn.SetIfEqual(ctx, k.value, old, val, ttl)
	if err != nil {
		return fmt.Errorf("cache: set %q: %w", k.user, redisx.Denied("set", err, ""))
	}
	if !wrote {
		return peek.ErrChanged
	}
	// Waiters are woken as after Set (whose pipeline carries this too).
	c.ann.published(c.ann.publishOne(ctx, k.value, message(noticeValue, k.value, "", "")))
	c.flights.Forget(k.value) // as in Set
	c.runs.forget(k.value)
	c.nearDrop(k)
	return nil
}

// peekFound records raw, the entry a Get found, on the peek.Probe ctx carries.
func peekFound(ctx context.Context, raw []byte) {
	if p := peek.From(ctx); p != nil {
		p.Found(raw)
	}
}
