package middleware

import (
	"net/http"
	"slices"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/engine"
	"github.com/hotkv/stampede/internal/httprule"
)

// Middleware caches HTTP responses in a cache.Cache. It is safe for
// concurrent use. Use New to create a Middleware.
type Middleware struct {
	c            *cache.Cache
	e            engine.View // c's operations for the middleware: looks counted on answering, writes only if unchanged
	o            Options
	now          func() time.Time
	statusHeader string   // canonical, or "-"
	keyHeaders   []string // canonical
	limit        int      // StoreLimit or its default
	maxValue     int      // the cache's MaxValueSize
	wait         time.Duration
	tagHeaders   []string // Tags.Headers, canonical
	tagLife      time.Duration
	tagSkew      time.Duration

	vary varyIndex

	// rules is o's policy for the storage rules (httprule), made by New
	// once o's defaults are set; read-only.
	rules httprule.Policy
}

// New returns a Middleware storing responses in c.
func New(c *cache.Cache, opts *Options) (*Middleware, error) {
	if c == nil {
		return nil, invalid("nil *cache.Cache")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	m := &Middleware{c: c, e: engine.Of(c), o: o, now: o.Now, statusHeader: o.StatusHeader, limit: o.StoreLimit, wait: o.WaitTimeout}
	if m.now == nil {
		m.now = time.Now
	}
	if m.statusHeader == "" {
		m.statusHeader = "X-Cache"
	}
	if m.statusHeader != "-" {
		m.statusHeader = http.CanonicalHeaderKey(m.statusHeader)
	}
	m.maxValue = m.e.MaxValueSize()
	limit, err := o.storeLimit(m.maxValue)
	if err != nil {
		return nil, err
	}
	m.limit = limit
	if m.wait == 0 {
		m.wait = 5 * time.Second
	}
	if m.o.Freshness.Fresh == 0 {
		m.o.Freshness.Fresh = time.Minute
	}
	m.rules = m.o.rules(m.maxValue)
	for _, h := range o.Keys.Headers {
		m.keyHeaders = append(m.keyHeaders, http.CanonicalHeaderKey(h))
	}
	for _, h := range o.Tags.Headers {
		if ch := http.CanonicalHeaderKey(h); !slices.Contains(m.tagHeaders, ch) {
			m.tagHeaders = append(m.tagHeaders, ch)
		}
	}
	m.tagLife, m.tagSkew = o.Tags.Lifetime, o.Tags.ClockSkew
	if m.tagLife == 0 {
		m.tagLife = 24 * time.Hour
	}
	if m.tagSkew == 0 {
		m.tagSkew = time.Second
	}
	return m, nil
}
