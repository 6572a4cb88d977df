package baselines

import (
	"context"

	"golang.org/x/sync/singleflight"
)

// Singleflight is Naive with concurrent calls for one key in this process
// sharing one call, as in-process caches do. Processes do not coordinate:
// each one that misses loads once. It is safe for concurrent use. Set
// Naive's fields; the group works as a zero value.
type Singleflight[V any] struct {
	Naive Naive[V]
	g     singleflight.Group
}

// Get returns the cached value of key; concurrent callers in this process
// share one GET and, on a miss, one load. The shared call runs with the
// first caller's ctx, as with a plain singleflight.Group.
func (s *Singleflight[V]) Get(ctx context.Context, key string, load Loader[V]) (V, error) {
	r, err, _ := s.g.Do(key, func() (any, error) {
		return s.Naive.Get(ctx, key, load)
	})
	v, _ := r.(V) // Do returns what Naive.Get returned: a V, or nil on error
	return v, err
}
