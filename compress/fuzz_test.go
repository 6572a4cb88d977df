package compress_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/compress"
)

// FuzzUnmarshal feeds arbitrary stored bytes to Unmarshal (seeds in
// testdata/fuzz/FuzzUnmarshal): it must not panic or inflate beyond
// MaxDecodedSize; bytes without the marker pass through unchanged; a
// frame either decodes or fails with ErrCorrupt or ErrValueTooLarge; and
// what decodes is written back and read again unchanged.
func FuzzUnmarshal(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0xc1, 's'})
	f.Add([]byte{0xc1, 'z', 0x28, 0xb5, 0x2f, 0xfd})
	const max = 1 << 20
	codecs := []*compress.Codec{
		compress.S2(cache.Raw, &compress.Options{MaxDecodedSize: max}),
		compress.Zstd(cache.Raw, &compress.Options{MaxDecodedSize: max, Threshold: 1}),
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, c := range codecs {
			var got []byte
			err := c.Unmarshal(b, &got)
			if len(b) == 0 || b[0] != 0xc1 {
				if err != nil || !bytes.Equal(got, b) {
					t.Fatalf("unframed %x: read %x, %v", b, got, err)
				}
				continue
			}
			if err != nil {
				if !errors.Is(err, compress.ErrCorrupt) && !errors.Is(err, cache.ErrValueTooLarge) {
					t.Fatalf("frame %x: unexpected error %v", b, err)
				}
				continue
			}
			if len(got) > max {
				t.Fatalf("frame %x inflated to %d bytes, max %d", b, len(got), max)
			}
			again, err := c.Marshal(got)
			if err != nil {
				t.Fatal(err)
			}
			var back []byte
			if err := c.Unmarshal(again, &back); err != nil || !bytes.Equal(back, got) {
				t.Fatalf("decoded %x re-encoded as %x read back as %x, %v", got, again, back, err)
			}
		}
	})
}
