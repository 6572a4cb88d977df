package compare

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	gocache "github.com/go-redis/cache/v9"
	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/compress"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/internal/testkit/sample"
)

// TestCompare_compression: the bytes each cache stores in Redis for the
// same JSON-like value (package sample) of about 1, 16 and 256 KiB, read
// with STRLEN after a write, and that the value reads back. go-redis/cache
// compresses with S2 above 64 bytes by default; stampede does so with the
// compress module's codec (S2 or zstd), and stores msgpack alone without
// it. sturdyc keeps values in process memory only.
func TestCompare_compression(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testCtx(t)
	rdb := s.Client(t)
	for _, size := range []int{1 << 10, 16 << 10, 256 << 10} {
		v := sample.Docs(size)
		row := fmt.Sprintf("bytes stored for a %d KiB JSON-like value", size>>10)
		stored := map[string]int64{}
		for _, st := range []struct {
			name  string
			codec cache.Codec
		}{
			{"stampede msgpack", cache.Msgpack},
			{"stampede +s2", compress.S2(cache.Msgpack, nil)},
			{"stampede +zstd", compress.Zstd(cache.Msgpack, nil)},
		} {
			ns := namespace()
			c := newStampede(t, s, ns, cache.Options{Codec: st.codec})
			if err := cache.Set(ctx, c, "k", v, cache.WithExpiry(cache.Expiry{Fresh: time.Minute})); err != nil {
				t.Fatal(err)
			}
			got, err := cache.Get[[]sample.Doc](ctx, c, "k")
			if err != nil || !reflect.DeepEqual(got, v) {
				t.Fatalf("%s: read back %d records, %v", st.name, len(got), err)
			}
			keys, err := rdb.Keys(ctx, ns+":*").Result()
			if err != nil || len(keys) != 1 {
				t.Fatalf("%s: keys %v, %v", st.name, keys, err)
			}
			stored[st.name] = rdb.StrLen(ctx, keys[0]).Val()
			result(t, row, st.name, "bytes", stored[st.name])
		}

		gc := newGoCache(t, s)
		key := redistest.Key(t, "gocache")
		if err := gc.Set(&gocache.Item{Ctx: ctx, Key: key, Value: v, TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		var got []sample.Doc
		if err := gc.Get(ctx, key, &got); err != nil || !reflect.DeepEqual(got, v) {
			t.Fatalf("go-redis/cache: read back %d records, %v", len(got), err)
		}
		stored["go-redis/cache"] = rdb.StrLen(ctx, key).Val()
		result(t, row, "go-redis/cache", "bytes", stored["go-redis/cache"])

		// The wrappers must shrink the value, and S2 must store about what
		// go-redis/cache's S2 stores (the same algorithm; the envelopes differ).
		plain := stored["stampede msgpack"]
		if stored["stampede +s2"] >= plain*9/10 || stored["stampede +zstd"] >= stored["stampede +s2"] {
			t.Errorf("%d KiB: stored %v: compression did not shrink the value", size>>10, stored)
		}
		if d := stored["stampede +s2"] - stored["go-redis/cache"]; d > 64 || d < -64 {
			t.Errorf("%d KiB: S2 stores %d bytes in stampede, %d in go-redis/cache", size>>10, stored["stampede +s2"], stored["go-redis/cache"])
		}
	}
}
