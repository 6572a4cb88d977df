// Package compress provides a cache.Codec wrapper that compresses the
// inner codec's bytes with S2 or zstd (github.com/klauspost/compress) when
// they are at least Options.Threshold bytes long.
//
//	codec := compress.S2(cache.Msgpack, nil) // compress encodings of 64 bytes or more
//	c, err := cache.New(rdb, &cache.Options{Codec: codec})
//
// # Format and compatibility
//
// A compressed value is stored as the marker byte 0xc1, an algorithm byte
// ('s' for S2, 'z' for zstd) and the compressed block. 0xc1 is never used
// by msgpack and never starts JSON (valid UTF-8 never contains 0xc1), so
// values written by cache.Msgpack or cache.JSON without this wrapper are
// read unchanged: the wrapper passes anything that does not start with
// 0xc1 to the inner codec. Values shorter than the threshold, and values
// that did not get smaller, are also written as the inner codec's bytes,
// so a process without the wrapper reads them too. A process without the
// wrapper cannot read compressed values: deploy readers first.
//
// Either algorithm is read whichever one Options.Algorithm selects, so the
// algorithm can be changed without losing entries.
//
// # cache.Raw and other codecs whose bytes may start with 0xc1
//
// When the inner codec's output itself starts with 0xc1 and is stored
// uncompressed, the wrapper writes it behind the marker and the algorithm
// byte 0 ("stored"), so everything the wrapper writes is read back exactly.
// A value written without the wrapper that starts with 0xc1 (possible only
// with cache.Raw or a custom codec) is ambiguous: the wrapper treats it as
// a frame and, unless it happens to be a valid one, Unmarshal returns an
// error matching ErrCorrupt rather than guessing; GetOrLoad then rebuilds
// the entry. It never returns the bytes of a frame it could not decode.
//
// # Limits
//
// Stored bytes may come from anyone who can write to the server, so
// Unmarshal refuses to inflate a value to more than Options.MaxDecodedSize
// bytes (default 4 MiB, the cache's default MaxValueSize) before
// allocating it, and Marshal refuses to write such a value, so everything
// written can be read back.
package compress
