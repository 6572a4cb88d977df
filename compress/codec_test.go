package compress_test

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/compress"
	"github.com/hotkv/stampede/internal/testkit/sample"
	"github.com/hotkv/stampede/lock"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
)

// doc is a JSON-like value (see package sample).
type doc = sample.Doc

// docs returns records whose msgpack encoding is at least size bytes,
// the same records on every call.
func docs(tb testing.TB, size int) []doc {
	tb.Helper()
	return sample.Docs(size)
}

func TestCodec_roundTrip(t *testing.T) {
	big := docs(t, 16<<10)
	for _, alg := range []compress.Algorithm{compress.AlgorithmS2, compress.AlgorithmZstd} {
		for _, inner := range []struct {
			name  string
			codec cache.Codec
		}{{"msgpack", cache.Msgpack}, {"json", cache.JSON}} {
			t.Run(alg.String()+"/"+inner.name, func(t *testing.T) {
				c, err := compress.New(inner.codec, &compress.Options{Algorithm: alg})
				if err != nil {
					t.Fatal(err)
				}
				for _, v := range [][]doc{nil, big[:1], big} {
					b, err := c.Marshal(v)
					if err != nil {
						t.Fatal(err)
					}
					plain, _ := inner.codec.Marshal(v)
					if len(b) > len(plain) || (len(v) == len(big) && len(b) >= len(plain)) {
						t.Errorf("%d records: %d bytes compressed, %d plain", len(v), len(b), len(plain))
					}
					if len(plain) < 64 && !bytes.Equal(b, plain) {
						t.Errorf("%d records below the threshold: got %x, want the inner bytes %x", len(v), b, plain)
					}
					var got []doc
					if err := c.Unmarshal(b, &got); err != nil {
						t.Fatal(err)
					}
					if len(got) != len(v) || (len(v) > 0 && !reflect.DeepEqual(got[len(v)-1], v[len(v)-1])) {
						t.Errorf("round trip of %d records gave %d", len(v), len(got))
					}
				}
			})
		}
	}
}

// Entries written without the wrapper, or by a wrapper with the other
// algorithm, are read; small entries the wrapper writes are read without
// it.
func TestCodec_compatibility(t *testing.T) {
	v := docs(t, 4<<10)
	s2c, zc := compress.S2(cache.Msgpack, nil), compress.Zstd(cache.Msgpack, nil)
	old, _ := cache.Msgpack.Marshal(v)
	for name, b := range map[string][]byte{"old": old, "s2": enc(t, s2c, v), "zstd": enc(t, zc, v)} {
		for cname, c := range map[string]*compress.Codec{"s2": s2c, "zstd": zc} {
			var got []doc
			if err := c.Unmarshal(b, &got); err != nil || len(got) != len(v) {
				t.Errorf("%s entry read by %s codec: %d records, %v", name, cname, len(got), err)
			}
		}
	}
	small := enc(t, s2c, "hi")
	var s string
	if err := cache.Msgpack.Unmarshal(small, &s); err != nil || s != "hi" {
		t.Errorf("small entry read without the wrapper: %q, %v", s, err)
	}
}

// cache.Raw bytes may start with the marker: the wrapper writes them
// behind a stored header and reads them back exactly; an old Raw entry
// that looks like a frame is an error, never garbage.
func TestCodec_rawMarker(t *testing.T) {
	c := compress.S2(cache.Raw, &compress.Options{Threshold: 1000})
	for _, in := range [][]byte{{0xc1}, {0xc1, 's', 1, 2}, {0xc1, 0}, {}, []byte("plain")} {
		b := enc(t, c, in)
		var got []byte
		if err := c.Unmarshal(b, &got); err != nil || !bytes.Equal(got, in) {
			t.Errorf("Raw %x: stored %x, read %x, %v", in, b, got, err)
		}
	}
	var got []byte
	if err := c.Unmarshal([]byte{0xc1, 's', 1, 2}, &got); !errors.Is(err, compress.ErrCorrupt) {
		t.Errorf("old Raw entry that looks framed: %x, %v; want ErrCorrupt", got, err)
	}
}

func TestCodec_Unmarshal_bad(t *testing.T) {
	c := compress.S2(cache.Msgpack, &compress.Options{MaxDecodedSize: 1 << 20})
	zeros := make([]byte, 2<<20)
	zenc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer zenc.Close()
	for _, tc := range []struct {
		name string
		in   []byte
		want error
	}{
		{"marker only", []byte{0xc1}, compress.ErrCorrupt},
		{"unknown algorithm", []byte{0xc1, 'x', 1, 2, 3}, compress.ErrCorrupt},
		{"s2 truncated", enc(t, c, docs(t, 2<<10))[:100], compress.ErrCorrupt},
		{"s2 garbage", []byte{0xc1, 's', 0xff, 0xff, 0xff}, compress.ErrCorrupt},
		{"zstd garbage", []byte{0xc1, 'z', 0x28, 0xb5, 0x2f, 0xfd, 1, 2, 3}, compress.ErrCorrupt},
		{"s2 declares 1 GiB", append([]byte{0xc1, 's', 0x80, 0x80, 0x80, 0x80, 0x04}, 0), cache.ErrValueTooLarge},
		{"s2 bomb", append([]byte{0xc1, 's'}, s2.Encode(nil, zeros)...), cache.ErrValueTooLarge},
		{"zstd bomb", zenc.EncodeAll(zeros, []byte{0xc1, 'z'}), cache.ErrValueTooLarge},
		{"zstd bomb without size", zstdNoSize(t, zeros), cache.ErrValueTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var v any
			if err := c.Unmarshal(tc.in, &v); !errors.Is(err, tc.want) {
				t.Errorf("Unmarshal: %v; want %v", err, tc.want)
			}
		})
	}
}

// zstdNoSize returns a zstd frame of b whose header does not declare the
// content size, as a stream encoder writes it.
func zstdNoSize(tb testing.TB, b []byte) []byte {
	tb.Helper()
	var buf bytes.Buffer
	buf.Write([]byte{0xc1, 'z'})
	w, err := zstd.NewWriter(&buf)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := w.Write(b); err != nil {
		tb.Fatal(err)
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

func TestCodec_Marshal_tooLarge(t *testing.T) {
	c := compress.S2(cache.Raw, &compress.Options{MaxDecodedSize: 100})
	if _, err := c.Marshal(make([]byte, 101)); !errors.Is(err, cache.ErrValueTooLarge) {
		t.Errorf("Marshal of 101 bytes with MaxDecodedSize 100: %v", err)
	}
	if _, err := c.Marshal(make([]byte, 100)); err != nil {
		t.Errorf("Marshal of 100 bytes: %v", err)
	}
}

func TestNew_invalid(t *testing.T) {
	for _, tc := range []struct {
		name  string
		inner cache.Codec
		opts  *compress.Options
		want  string
	}{
		{"nil inner", nil, nil, "inner (the codec whose output is compressed) is nil"},
		{"negative threshold", cache.Msgpack, &compress.Options{Threshold: -1}, "Options.Threshold -1 is negative"},
		{"negative max", cache.Msgpack, &compress.Options{MaxDecodedSize: -1}, "Options.MaxDecodedSize -1 is negative"},
		{"unknown algorithm", cache.Msgpack, &compress.Options{Algorithm: 7}, "Options.Algorithm 7 is unknown: AlgorithmS2 or AlgorithmZstd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := compress.New(tc.inner, tc.opts)
			if want := "compress: " + tc.want; !errors.Is(err, lock.ErrInvalid) || err.Error() != want {
				t.Errorf("New: %v; want %q matching lock.ErrInvalid", err, want)
			}
			defer func() {
				if r := recover(); r == nil || !strings.HasPrefix(r.(string), "compress:") {
					t.Errorf("S2 recovered %v; want a compress: panic", r)
				}
			}()
			if tc.opts == nil || tc.opts.Algorithm == 0 { // S2 ignores Algorithm
				compress.S2(tc.inner, tc.opts)
			} else {
				panic("compress: skipped")
			}
		})
	}
}

// enc returns c.Marshal(v), failing tb on an error.
func enc(tb testing.TB, c cache.Codec, v any) []byte {
	tb.Helper()
	b, err := c.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}
