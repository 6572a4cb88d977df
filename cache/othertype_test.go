package cache_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/redistest"
)

// TestCache_wrongType: a key that holds a value of another type (a hash
// written by someone else under the cache's name) is an error that says
// so, from every read, never a plain miss; nothing overwrites it.
func TestCache_wrongType(t *testing.T) {
	reads := []struct {
		name string
		read func(ctx context.Context, c *cache.Cache, key string) error
	}{
		{"Get", func(ctx context.Context, c *cache.Cache, key string) error {
			_, err := cache.Get[string](ctx, c, key)
			return err
		}},
		{"GetOrLoad", func(ctx context.Context, c *cache.Cache, key string) error {
			_, err := cache.GetOrLoad(ctx, c, key, func(context.Context) (string, error) { return "loaded", nil })
			return err
		}},
		{"GetOrLoadMany", func(ctx context.Context, c *cache.Cache, key string) error {
			_, err := cache.GetOrLoadMany(ctx, c, []string{key}, func(_ context.Context, ks []string) (map[string]string, error) {
				return map[string]string{ks[0]: "loaded"}, nil
			})
			return err
		}},
	}
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		for _, near := range []bool{false, true} {
			for _, tc := range reads {
				name := tc.name
				if near {
					name += "/near"
				}
				t.Run(name, func(t *testing.T) {
					ctx := testCtx(t)
					opts := &cache.Options{Namespace: namespace(t)}
					if near {
						opts.Near = &cache.Near{MaxEntries: 100}
					}
					c, rc := newCache(t, s, opts)
					if err := rc.HSet(ctx, opts.Namespace+":{k}", "f", "v").Err(); err != nil {
						t.Fatal(err)
					}
					err := tc.read(ctx, c, "k")
					if err == nil || errors.Is(err, cache.ErrMiss) || !strings.Contains(err.Error(), "WRONGTYPE") {
						t.Errorf("err = %v, want an error that says the key holds another type", err)
					}
					if typ := rc.Type(ctx, opts.Namespace+":{k}").Val(); typ != "hash" {
						t.Errorf("the key is now a %s", typ)
					}
				})
			}
		}
	}, redistest.Redis8, redistest.Valkey)
}

// TestGet_otherType: Get of a key whose value was stored as another Go
// type is a miss that says why, not a plain one: errors.Is finds ErrMiss,
// and the message names the type.
func TestGet_otherType(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		c, _ := newCache(t, s, nil)
		if err := cache.Set(ctx, c, "int", 42); err != nil {
			t.Fatal(err)
		}
		_, err := cache.Get[string](ctx, c, "int")
		if !errors.Is(err, cache.ErrMiss) || !strings.Contains(err.Error(), "as string") {
			t.Errorf("Get[string] of an int: %v, want a miss that names the type", err)
		}
	}, redistest.Redis8)
}
