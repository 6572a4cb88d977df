package compress

import (
	"errors"
	"fmt"
	"sync"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/lock"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
)

// Algorithm selects how Marshal compresses. Unmarshal reads every
// algorithm, whichever one is selected.
type Algorithm int

const (
	// AlgorithmS2 is S2 (github.com/klauspost/compress/s2), a faster
	// Snappy extension; what go-redis/cache uses. It is the default.
	AlgorithmS2 Algorithm = iota
	// AlgorithmZstd is zstd at its default level: smaller output than S2
	// for more CPU on both sides.
	AlgorithmZstd
)

// String returns "s2" or "zstd".
func (a Algorithm) String() string {
	switch a {
	case AlgorithmS2:
		return "s2"
	case AlgorithmZstd:
		return "zstd"
	}
	return fmt.Sprintf("Algorithm(%d)", int(a))
}

// Options configure a compressing codec. A nil *Options means all
// defaults.
type Options struct {
	// Algorithm is how values are compressed. Default: AlgorithmS2.
	Algorithm Algorithm
	// Threshold is the smallest encoding (in bytes, as the inner codec
	// produced it) that is compressed; shorter ones are stored as they are.
	// 1 compresses everything. Negative is an error. Default (0): 64, as
	// go-redis/cache.
	Threshold int
	// MaxDecodedSize is the largest value, in bytes of the inner codec's
	// encoding, that Marshal writes and Unmarshal inflates; larger ones are
	// refused with an error matching cache.ErrValueTooLarge. It bounds the
	// memory a hostile compressed value can make a reader allocate.
	// Negative is an error. Default (0): 4 MiB, the cache's default
	// MaxValueSize.
	MaxDecodedSize int
}

const (
	defaultThreshold = 64
	defaultMaxSize   = 4 << 20

	// marker starts every frame. 0xc1 is "never used" in msgpack and is
	// never a byte of valid UTF-8, so it cannot start cache.Msgpack or
	// cache.JSON output.
	marker = 0xc1
	// Algorithm bytes, the second byte of a frame.
	algStored = 0   // the inner codec's bytes follow unchanged
	algS2     = 's' // an S2 block follows
	algZstd   = 'z' // zstd frames follow
	headerLen = 2
)

// Codec is a cache.Codec that compresses another codec's output. Use New,
// S2 or Zstd to create one. It is safe for concurrent use.
type Codec struct {
	inner     cache.Codec
	alg       Algorithm
	threshold int
	maxSize   int

	encOnce sync.Once // zstd encoder and decoder are made on first use
	enc     *zstd.Encoder
	encErr  error
	decOnce sync.Once
	dec     *zstd.Decoder
	decErr  error
}

var _ cache.Codec = (*Codec)(nil)

// New returns a Codec that compresses inner's output as opts say. It
// returns an error matching lock.ErrInvalid when inner is nil or an option
// is out of range.
func New(inner cache.Codec, opts *Options) (*Codec, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	switch {
	case inner == nil:
		return nil, invalid("inner (the codec whose output is compressed) is nil")
	case o.Algorithm != AlgorithmS2 && o.Algorithm != AlgorithmZstd:
		return nil, invalid("Options.Algorithm %d is unknown: AlgorithmS2 or AlgorithmZstd", int(o.Algorithm))
	case o.Threshold < 0:
		return nil, invalid("Options.Threshold %d is negative", o.Threshold)
	case o.MaxDecodedSize < 0:
		return nil, invalid("Options.MaxDecodedSize %d is negative", o.MaxDecodedSize)
	}
	c := &Codec{inner: inner, alg: o.Algorithm, threshold: o.Threshold, maxSize: o.MaxDecodedSize}
	if c.threshold == 0 {
		c.threshold = defaultThreshold
	}
	if c.maxSize == 0 {
		c.maxSize = defaultMaxSize
	}
	return c, nil
}

// S2 returns a Codec that compresses inner's output with S2 (opts.Algorithm
// is ignored). A nil opts means defaults. It panics, with a message
// starting "compress:", when inner is nil or an option is out of range;
// use New to get an error instead.
func S2(inner cache.Codec, opts *Options) *Codec { return must(inner, opts, AlgorithmS2) }

// Zstd returns a Codec that compresses inner's output with zstd
// (opts.Algorithm is ignored). A nil opts means defaults. It panics like
// S2.
func Zstd(inner cache.Codec, opts *Options) *Codec { return must(inner, opts, AlgorithmZstd) }

func must(inner cache.Codec, opts *Options, alg Algorithm) *Codec {
	var o Options
	if opts != nil {
		o = *opts
	}
	o.Algorithm = alg
	c, err := New(inner, &o)
	if err != nil {
		panic(err.Error())
	}
	return c
}

// invalidError is a bad argument or option: its text names the argument
// and its value, and it matches lock.ErrInvalid. (This module is released
// on its own: it does not import the root module's internal packages,
// whose API may change in any release.)
type invalidError string

func (e invalidError) Error() string { return string(e) }

// Is reports whether target is lock.ErrInvalid.
func (e invalidError) Is(target error) bool { return target == lock.ErrInvalid }

// invalid returns an invalidError whose text is "compress: " and the
// formatted message.
func invalid(format string, args ...any) error {
	return invalidError("compress: " + fmt.Sprintf(format, args...))
}

// Marshal encodes v with the inner codec and compresses the result when it
// is at least Threshold bytes long and compressing makes it smaller.
// Otherwise it returns the inner codec's bytes, behind a two-byte "stored"
// header only when they start with the frame marker 0xc1.
func (c *Codec) Marshal(v any) ([]byte, error) {
	b, err := c.inner.Marshal(v)
	if err != nil {
		return nil, err
	}
	if len(b) > c.maxSize {
		return nil, fmt.Errorf("compress: %w: encoded value is %d bytes, MaxDecodedSize is %d",
			cache.ErrValueTooLarge, len(b), c.maxSize)
	}
	if len(b) >= c.threshold {
		out, err := c.compress(b)
		if err != nil {
			return nil, err
		}
		if len(out) < len(b) {
			return out, nil
		}
	}
	if len(b) > 0 && b[0] == marker {
		return append([]byte{marker, algStored}, b...), nil
	}
	return b, nil
}

func (c *Codec) compress(b []byte) ([]byte, error) {
	switch c.alg {
	case AlgorithmZstd:
		enc, err := c.encoder()
		if err != nil {
			return nil, err
		}
		return enc.EncodeAll(b, []byte{marker, algZstd}), nil
	default:
		n := s2.MaxEncodedLen(len(b))
		if n < 0 {
			return nil, fmt.Errorf("compress: %w: %d bytes is too large for s2", cache.ErrValueTooLarge, len(b))
		}
		out := make([]byte, headerLen+n)
		out[0], out[1] = marker, algS2
		enc := s2.Encode(out[headerLen:], b)
		return out[:headerLen+len(enc)], nil
	}
}

// Unmarshal decompresses b if it is a frame and decodes the result with
// the inner codec into the value v points to. Bytes that do not start with
// 0xc1 go to the inner codec unchanged. A frame that does not decode
// returns an error matching ErrCorrupt; one that would inflate beyond
// MaxDecodedSize returns an error matching cache.ErrValueTooLarge, before
// the memory is allocated.
func (c *Codec) Unmarshal(b []byte, v any) error {
	raw, err := c.Decompress(b)
	if err != nil {
		return err
	}
	return c.inner.Unmarshal(raw, v)
}

// Decompress returns the inner codec's bytes held in b: b itself when it
// does not start with 0xc1, else the frame's content. Errors are as for
// Unmarshal.
func (c *Codec) Decompress(b []byte) ([]byte, error) {
	if len(b) == 0 || b[0] != marker {
		return b, nil
	}
	if len(b) < headerLen {
		return nil, fmt.Errorf("%w: %d-byte value has no algorithm byte", ErrCorrupt, len(b))
	}
	body := b[headerLen:]
	switch b[1] {
	case algStored:
		return body, nil
	case algS2:
		n, err := s2.DecodedLen(body)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		if n > c.maxSize {
			return nil, c.tooLarge(n)
		}
		out, err := s2.Decode(make([]byte, n), body)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		return out, nil
	case algZstd:
		dec, err := c.decoder()
		if err != nil {
			return nil, err
		}
		out, err := dec.DecodeAll(body, nil)
		if errors.Is(err, zstd.ErrDecoderSizeExceeded) || errors.Is(err, zstd.ErrWindowSizeExceeded) {
			return nil, c.tooLarge(-1)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: zstd: %v", ErrCorrupt, err)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: unknown algorithm byte 0x%02x", ErrCorrupt, b[1])
}

func (c *Codec) tooLarge(n int) error {
	if n < 0 {
		return fmt.Errorf("compress: %w: value inflates beyond MaxDecodedSize %d", cache.ErrValueTooLarge, c.maxSize)
	}
	return fmt.Errorf("compress: %w: value inflates to %d bytes, MaxDecodedSize is %d", cache.ErrValueTooLarge, n, c.maxSize)
}

func (c *Codec) encoder() (*zstd.Encoder, error) {
	c.encOnce.Do(func() {
		c.enc, c.encErr = zstd.NewWriter(nil,
			zstd.WithEncoderLevel(zstd.SpeedDefault),
			zstd.WithLowerEncoderMem(true),
			zstd.WithZeroFrames(true))
	})
	return c.enc, c.encErr
}

func (c *Codec) decoder() (*zstd.Decoder, error) {
	c.decOnce.Do(func() {
		c.dec, c.decErr = zstd.NewReader(nil,
			zstd.WithDecoderMaxMemory(uint64(c.maxSize)),
			zstd.WithDecoderConcurrency(0))
	})
	return c.dec, c.decErr
}
