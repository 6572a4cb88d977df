package cache

import (
	"context"
	"time"

	"github.com/hotkv/stampede/loader"
)

// Expiry is a loaded value's lifetime: how long it stays fresh, then how
// long after that it may be served stale while it is reloaded; it
// overrides, for that value, the Cache's ExpiryPolicy.Fresh and Stale
// (WithExpiry for one call, LoadWithExpiry for one loaded value). A zero
// Fresh keeps the call's (WithExpiry's, or Options.Expiry's).
type Expiry struct {
	Fresh time.Duration
	Stale time.Duration
}

// LoadWithExpiry returns a loader for GetOrLoad whose values live as long
// as load says: for values whose lifetime is only known once loaded (an
// HTTP response's max-age, a token's expiry). A Fresh below 1ms (but not
// zero) is raised to 1ms, a negative Stale to 0, and both are clamped as
// Options.Expiry.Fresh and Options.Expiry.Stale are.
// The Expiry of a failed load is ignored. The result may be wrapped
// (loader.WithRetry, loader.WithTimeout) like any loader.
func LoadWithExpiry[V any](load func(ctx context.Context) (V, Expiry, error)) loader.Func[V] {
	if load == nil {
		return nil // GetOrLoad reports the nil loader
	}
	return func(ctx context.Context) (V, error) {
		v, e, err := load(ctx)
		if err == nil && e.Fresh != 0 {
			expire(ctx, e.Fresh, e.Stale)
		}
		return v, err
	}
}
