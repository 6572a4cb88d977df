package compress_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/compress"
	"github.com/hotkv/stampede/internal/testkit/redistest"
)

// benchCodecs are the codecs compared: msgpack alone and wrapped.
var benchCodecs = []struct {
	name  string
	codec cache.Codec
}{
	{"msgpack", cache.Msgpack},
	{"msgpack+s2", compress.S2(cache.Msgpack, nil)},
	{"msgpack+zstd", compress.Zstd(cache.Msgpack, nil)},
}

var benchSizes = []int{1 << 10, 16 << 10, 256 << 10}

// BenchmarkCodec measures, for JSON-like values of 1, 16 and 256 KiB (as
// msgpack), the bytes each codec stores (stored-B, and ratio to msgpack
// alone) and the CPU of one encode (a write), one decode (a hit's share
// of the codec) and, for the wrappers, the decompression alone.
func BenchmarkCodec(b *testing.B) {
	for _, size := range benchSizes {
		v := docs(b, size)
		plain, err := cache.Msgpack.Marshal(v)
		if err != nil {
			b.Fatal(err)
		}
		for _, bc := range benchCodecs {
			enc, err := bc.codec.Marshal(v)
			if err != nil {
				b.Fatal(err)
			}
			name := fmt.Sprintf("%dKiB/%s", size>>10, bc.name)
			b.Run(name+"/decode", func(b *testing.B) {
				b.SetBytes(int64(len(plain)))
				b.ReportAllocs()
				for b.Loop() {
					var got []doc
					if err := bc.codec.Unmarshal(enc, &got); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(len(enc)), "stored-B")
				b.ReportMetric(float64(len(enc))/float64(len(plain)), "ratio")
			})
			if cc, ok := bc.codec.(*compress.Codec); ok {
				b.Run(name+"/decompress", func(b *testing.B) { // the wrapper's share of decode
					b.SetBytes(int64(len(plain)))
					b.ReportAllocs()
					for b.Loop() {
						if _, err := cc.Decompress(enc); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
			b.Run(name+"/encode", func(b *testing.B) {
				b.SetBytes(int64(len(plain)))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := bc.codec.Marshal(v); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkCache_Get measures a hit through a cache on Redis 8 on
// loopback: network, the entry envelope and the codec, with parallel
// callers.
func BenchmarkCache_Get(b *testing.B) {
	s := redistest.Shared(b, redistest.Redis8)
	ctx := context.Background()
	for _, size := range benchSizes {
		v := docs(b, size)
		for _, bc := range benchCodecs {
			b.Run(fmt.Sprintf("%dKiB/%s", size>>10, bc.name), func(b *testing.B) {
				c := newCache(b, s, redistest.Key(b, "ns"), bc.codec)
				if err := cache.Set(ctx, c, "k", v); err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if _, err := cache.Get[[]doc](ctx, c, "k"); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}
