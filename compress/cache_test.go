package compress_test

import (
	"context"
	"errors"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/compress"
	"github.com/hotkv/stampede/internal/testkit/redistest"
)

func TestMain(m *testing.M) {
	redistest.Main(m, nil)
}

func testCtx(tb testing.TB) context.Context {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	tb.Cleanup(cancel)
	return ctx
}

// newCache returns a cache on s with codec, closed at the end of the test.
func newCache(tb testing.TB, s *redistest.Server, ns string, codec cache.Codec) *cache.Cache {
	tb.Helper()
	c, err := cache.New(s.Client(tb), &cache.Options{Namespace: ns, Codec: codec})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// stored returns the payload stored under key: the codec's bytes.
func stored(tb testing.TB, s *redistest.Server, ns, key string) []byte {
	tb.Helper()
	b, err := cache.Get[[]byte](testCtx(tb), newCache(tb, s, ns, cache.Raw), key)
	if err != nil {
		tb.Fatalf("raw read of %q: %v", key, err)
	}
	return b
}

func TestCache_roundTrip(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testCtx(t)
	for _, codec := range []*compress.Codec{compress.S2(cache.Msgpack, nil), compress.Zstd(cache.Msgpack, nil)} {
		v := docs(t, 16<<10)
		ns := redistest.Key(t, "ns")
		c := newCache(t, s, ns, codec)
		var loads atomic.Int32
		load := func(context.Context) ([]doc, error) { loads.Add(1); return v, nil }
		for range 2 { // a miss then a hit
			got, err := cache.GetOrLoad(ctx, c, "a", load)
			if err != nil || !reflect.DeepEqual(got, v) {
				t.Fatalf("GetOrLoad: %d records, %v", len(got), err)
			}
		}
		if n := loads.Load(); n != 1 {
			t.Errorf("%d loads, want 1", n)
		}
		if err := cache.Set(ctx, c, "b", v); err != nil {
			t.Fatal(err)
		}
		got, err := cache.Get[[]doc](ctx, c, "b")
		if err != nil || !reflect.DeepEqual(got, v) {
			t.Fatalf("Get after Set: %d records, %v", len(got), err)
		}
		plain, _ := cache.Msgpack.Marshal(v)
		for _, key := range []string{"a", "b"} {
			if b := stored(t, s, ns, key); len(b) >= len(plain)*3/4 || b[0] != 0xc1 {
				t.Errorf("%q stored as %d bytes starting %#x; msgpack alone is %d", key, len(b), b[0], len(plain))
			}
		}
	}
}

// Entries written by a cache without the wrapper are read by one with it,
// and entries below the threshold written with it are read without it.
func TestCache_oldEntries(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testCtx(t)
	ns := redistest.Key(t, "ns")
	plain := newCache(t, s, ns, cache.Msgpack)
	wrapped := newCache(t, s, ns, compress.S2(cache.Msgpack, nil))
	big := docs(t, 4<<10)

	if err := cache.Set(ctx, plain, "old", big); err != nil {
		t.Fatal(err)
	}
	got, err := cache.GetOrLoad(ctx, wrapped, "old", func(context.Context) ([]doc, error) {
		return nil, errors.New("loader called for an entry that is there")
	})
	if err != nil || !reflect.DeepEqual(got, big) {
		t.Errorf("old entry read with the wrapper: %d records, %v", len(got), err)
	}

	if err := cache.Set(ctx, wrapped, "small", "hello"); err != nil {
		t.Fatal(err)
	}
	if s, err := cache.Get[string](ctx, plain, "small"); err != nil || s != "hello" {
		t.Errorf("small entry read without the wrapper: %q, %v", s, err)
	}

	// A compressed entry is not readable without the wrapper: a decode
	// error, which GetOrLoad answers by rebuilding.
	if err := cache.Set(ctx, wrapped, "new", big); err != nil {
		t.Fatal(err)
	}
	if _, err := cache.Get[[]doc](ctx, plain, "new"); err == nil {
		t.Error("compressed entry decoded without the wrapper")
	}
}

// A corrupt frame or a bomb under a key is a miss (with a decode-failure
// event carrying the error) for Get and a rebuild for GetOrLoad, never
// garbage.
func TestCache_badEntries(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testCtx(t)
	ns := redistest.Key(t, "ns")
	raw := newCache(t, s, ns, cache.Raw)
	failures := make(chan error, 10)
	c, err := cache.New(s.Client(t), &cache.Options{
		Namespace: ns,
		Codec:     compress.S2(cache.Msgpack, &compress.Options{MaxDecodedSize: 1 << 20}),
		Observer: func(e cache.Event) {
			if e.Kind == cache.EventDecodeFailure {
				failures <- e.Err
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	bomb := enc(t, compress.S2(cache.Raw, &compress.Options{MaxDecodedSize: 2 << 20}), make([]byte, 2<<20))
	for _, tc := range []struct {
		name string
		b    []byte
		want error
	}{
		{"corrupt", []byte{0xc1, 's', 0x05, 0xff, 0xff}, compress.ErrCorrupt},
		{"bomb", bomb, cache.ErrValueTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := cache.Set(ctx, raw, tc.name, tc.b); err != nil {
				t.Fatal(err)
			}
			// Get reports an undecodable entry as a miss and the
			// decode error as an event.
			if _, err := cache.Get[string](ctx, c, tc.name); !errors.Is(err, cache.ErrMiss) {
				t.Errorf("Get: %v; want ErrMiss", err)
			}
			select {
			case err := <-failures:
				if !errors.Is(err, tc.want) {
					t.Errorf("decode failure: %v; want %v", err, tc.want)
				}
			default:
				t.Error("Get did not report a decode failure")
			}
			got, err := cache.GetOrLoad(ctx, c, tc.name, func(context.Context) (string, error) { return "rebuilt", nil })
			if err != nil || got != "rebuilt" {
				t.Errorf("GetOrLoad: %q, %v; want the entry rebuilt", got, err)
			}
			for len(failures) > 0 { // GetOrLoad's own report of the entry it rebuilt
				<-failures
			}
		})
	}
}
