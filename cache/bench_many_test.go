package cache_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/redistest"
)

// BenchmarkGetOrLoadMany_miss is GetOrLoadMany of 100 keys none of which
// is stored: one MGET, the claims, one loader call, the writes in place
// of the claims and the announcements; against the floor of one MGET and
// one pipeline of 100 plain SETs of the same values, in the same run.
// Compare ns/op.
func BenchmarkGetOrLoadMany_miss(b *testing.B) {
	s := redistest.Shared(b, redistest.Redis8)
	ctx := context.Background()
	c, rc := newCache(b, s, nil)
	const n = 100
	load := func(_ context.Context, keys []string) (map[string]profile, error) {
		m := make(map[string]profile, len(keys))
		for _, k := range keys {
			m[k] = sample
		}
		return m, nil
	}
	round := 0
	batch := func(prefix string) []string {
		round++
		keys := make([]string, n)
		for i := range keys {
			keys[i] = prefix + strconv.Itoa(round) + ":" + strconv.Itoa(i)
		}
		return keys
	}
	b.Run("mget-pipelined-set", func(b *testing.B) {
		for b.Loop() {
			keys := batch(redistest.Key(b, "raw"))
			if err := rc.MGet(ctx, keys...).Err(); err != nil {
				b.Fatal(err)
			}
			pipe := rc.Pipeline()
			for _, k := range keys {
				pipe.Set(ctx, k, "v", 0)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("stampede", func(b *testing.B) {
		for b.Loop() {
			m, err := cache.GetOrLoadMany(ctx, c, batch("k"), load)
			if err != nil || len(m) != n {
				b.Fatalf("GetOrLoadMany = %d values, %v", len(m), err)
			}
		}
	})
}
