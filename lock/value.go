package lock

import (
	"time"

	"github.com/hotkv/stampede/internal/lockvalue"
)

// A lock's stored value is the token, the time it was obtained and the
// metadata; see internal/lockvalue, which package cache shares to tell a
// lock from its own data.

// Info is what Inspect reads about a lock.
type Info struct {
	Token    string        // the holder's token
	Since    time.Time     // when the holder obtained it, by the holder's clock
	Metadata string        // what the holder attached (WithMetadata)
	TTL      time.Duration // time left before it expires; -1 if it never does
}

// decodeValue parses a stored value; ok is false for values this package
// did not write.
func decodeValue(v string) (Info, bool) {
	val, ok := lockvalue.Decode(v)
	return Info{Token: val.Token, Since: val.Since, Metadata: val.Metadata}, ok
}
