package compress

import "errors"

// ErrCorrupt is returned by Unmarshal for bytes that start with the frame
// marker 0xc1 but are not a frame this package can decode: an unknown
// algorithm byte, a truncated header or a block that does not decompress.
var ErrCorrupt = errors.New("compress: corrupt frame")
