package cache_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/engine"
	"github.com/hotkv/stampede/internal/testkit/redistest"
)

// TestEngine_SetIfUnchanged: Engine's SetIfUnchanged (the middleware's revalidation)
// writes only if the key still holds the entry a Peek saw, in one
// conditional write: a Set or Delete after that Peek wins, however the
// two calls interleave.
func TestEngine_SetIfUnchanged(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		for _, near := range []bool{false, true} {
			if near && s.Kind == redistest.Miniredis {
				continue
			}
			name := "server"
			if near {
				name = "near"
			}
			t.Run(name, func(t *testing.T) {
				ctx := testCtx(t)
				c, other := enginePair(t, s, near)
				seen := func() []byte { return peekRaw(t, ctx, c) }
				get := func(want string) {
					t.Helper()
					v, err := cache.Get[string](ctx, other, "k")
					if want == "" {
						if !errors.Is(err, cache.ErrMiss) {
							t.Fatalf("Get = %q, %v; want a miss", v, err)
						}
						return
					}
					if err != nil || v != want {
						t.Fatalf("Get = %q, %v; want %q", v, err, want)
					}
				}

				if err := cache.Set(ctx, c, "k", "v1"); err != nil {
					t.Fatal(err)
				}
				old := seen()
				if err := cache.Set(ctx, other, "k", "v2"); err != nil {
					t.Fatal(err)
				}
				if err := engine.Of(c).SetIfUnchanged(ctx, "k", "v3", old, time.Minute, 0); !errors.Is(err, engine.ErrChanged) {
					t.Fatalf("Set after another Set: %v; want engine.ErrChanged", err)
				}
				get("v2")

				if near {
					redistest.WaitFor(t, ctx, "the near cache to hold v2", func() bool {
						v, err := cache.Get[string](ctx, c, "k")
						return err == nil && v == "v2" && c.Stats().NearHits > 0
					})
				}
				old = seen()
				if err := engine.Of(c).SetIfUnchanged(ctx, "k", "v3", old, time.Minute, 0); err != nil {
					t.Fatalf("Set on an unchanged key: %v", err)
				}
				get("v3")
				if v, err := cache.Get[string](ctx, c, "k"); err != nil || v != "v3" {
					t.Fatalf("the writer's Get = %q, %v; want v3", v, err)
				}

				old = seen()
				if err := other.Delete(ctx, "k"); err != nil {
					t.Fatal(err)
				}
				if err := engine.Of(c).SetIfUnchanged(ctx, "k", "v4", old, time.Minute, 0); !errors.Is(err, engine.ErrChanged) {
					t.Fatalf("Set after a Delete: %v; want engine.ErrChanged", err)
				}
				get("")
			})
		}
	})
}

// TestEngine_Peek: a Peek answers as Get does but counts nothing until
// its Found's Count, which counts what Get would have, once; a value's
// Found holds its entry as stored, stale ones too, so that
// SetIfUnchanged can write against it.
func TestEngine_Peek(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis7)
	ctx := testCtx(t)
	clk := newClock()
	c := newCacheOn(t, s.Client(t), &cache.Options{Namespace: namespace(t), Expiry: cache.ExpiryPolicy{Fresh: time.Minute, Stale: time.Hour}, Now: clk.Now})
	e := engine.Of(c)
	if err := cache.Set(ctx, c, "k", "v1"); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		key     string
		advance time.Duration
		wantErr error
		want    func(cache.Stats) uint64
	}{
		{"miss", "none", 0, cache.ErrMiss, func(s cache.Stats) uint64 { return s.Misses }},
		{"fresh", "k", 0, nil, func(s cache.Stats) uint64 { return s.Hits }},
		{"stale", "k", 2 * time.Minute, cache.ErrStale, func(s cache.Stats) uint64 { return s.StaleHits }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk.Advance(tt.advance)
			before := c.Stats()
			v, f, err := engine.Peek[string](ctx, e, tt.key)
			if !errors.Is(err, tt.wantErr) || tt.wantErr == nil && err != nil {
				t.Fatalf("Peek = %q, %v; want %v", v, err, tt.wantErr)
			}
			if got := c.Stats(); got != before {
				t.Fatalf("Stats changed by the Peek alone: %+v, then %+v", before, got)
			}
			f.Count()
			f.Count()
			if n := tt.want(c.Stats()) - tt.want(before); n != 1 {
				t.Fatalf("Count twice counted %d; want 1", n)
			}
			if errors.Is(tt.wantErr, cache.ErrMiss) {
				if v != "" || f.Raw != nil {
					t.Fatalf("a miss gave %q and an entry %q", v, f.Raw)
				}
				return
			}
			if v != "v1" || f.Raw == nil {
				t.Fatalf("Peek = %q with entry %q; want v1 and its entry", v, f.Raw)
			}
			if err := e.SetIfUnchanged(ctx, "k", "v1", f.Raw, time.Minute, time.Hour); err != nil {
				t.Fatalf("SetIfUnchanged with the entry Peek found: %v", err)
			}
			clk.Advance(-tt.advance)
		})
	}
}

// TestEngine_DeleteIfUnchanged: Engine's DeleteIfUnchanged (the
// middleware's drop of a page whose tag was purged) deletes only if the
// key still holds the entry a Peek saw: a Set after that Peek wins, and
// the near cache of the process that deleted forgets the entry.
func TestEngine_DeleteIfUnchanged(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		c, other := enginePair(t, s, s.Kind != redistest.Miniredis)
		seen := func() []byte { return peekRaw(t, ctx, c) }
		if err := cache.Set(ctx, c, "k", "v1"); err != nil {
			t.Fatal(err)
		}
		old := seen()
		if err := cache.Set(ctx, other, "k", "v2"); err != nil {
			t.Fatal(err)
		}
		if err := engine.Of(c).DeleteIfUnchanged(ctx, "k", old); !errors.Is(err, engine.ErrChanged) {
			t.Fatalf("Delete after another Set: %v; want engine.ErrChanged", err)
		}
		if v, err := cache.Get[string](ctx, other, "k"); err != nil || v != "v2" {
			t.Fatalf("Get after the refused delete = %q, %v; want v2", v, err)
		}
		if err := engine.Of(c).DeleteIfUnchanged(ctx, "k", nil); !errors.Is(err, engine.ErrChanged) {
			t.Fatalf("Delete with no entry seen: %v; want engine.ErrChanged", err)
		}
		redistest.WaitFor(t, ctx, "the writer to read v2", func() bool {
			v, err := cache.Get[string](ctx, c, "k")
			return err == nil && v == "v2"
		})
		old = seen()
		if err := engine.Of(c).DeleteIfUnchanged(ctx, "k", old); err != nil {
			t.Fatalf("Delete of an unchanged key: %v", err)
		}
		for name, cc := range map[string]*cache.Cache{"deleter": c, "other": other} {
			if v, err := cache.Get[string](ctx, cc, "k"); !errors.Is(err, cache.ErrMiss) {
				t.Fatalf("%s's Get after the delete = %q, %v; want a miss", name, v, err)
			}
		}
		if err := engine.Of(c).DeleteIfUnchanged(ctx, "k", old); !errors.Is(err, engine.ErrChanged) {
			t.Fatalf("second delete: %v; want engine.ErrChanged", err)
		}
	})
}

// enginePair returns a Cache (with a near cache if near) and another on
// the same namespace, for the Engine tests.
func enginePair(t *testing.T, s *redistest.Server, near bool) (c, other *cache.Cache) {
	t.Helper()
	opts := &cache.Options{Namespace: namespace(t)}
	if near {
		opts = nearOpts(t)
		c = nearCache(t, s, opts)
	} else {
		c = newCacheOn(t, s.Client(t), opts)
	}
	return c, newCacheOn(t, s.Client(t), &cache.Options{Namespace: opts.Namespace})
}

// peekRaw is the entry a Peek of "k" finds in c, as stored.
func peekRaw(t *testing.T, ctx context.Context, c *cache.Cache) []byte {
	t.Helper()
	_, f, err := engine.Peek[string](ctx, engine.Of(c), "k")
	if err != nil || f.Raw == nil {
		t.Fatalf("Peek: %v, entry %q", err, f.Raw)
	}
	return f.Raw
}
