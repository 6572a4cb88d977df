package cache

import (
	"context"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/hotkv/stampede/internal/redisx"
	"github.com/hotkv/stampede/lock"
	"github.com/redis/go-redis/v9"
)

// RedisClient is what New accepts: the go-redis v9 methods a Cache uses,
// those of lock.RedisClient and publish/subscribe for announcements. Every
// go-redis UniversalClient satisfies it: *redis.Client (also when made by
// redis.NewFailoverClient), *redis.ClusterClient and *redis.Ring.
type RedisClient interface {
	lock.RedisClient
	Publish(ctx context.Context, channel string, message any) *redis.IntCmd
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

var (
	_ RedisClient = (*redis.Client)(nil)
	_ RedisClient = (*redis.ClusterClient)(nil)
	_ RedisClient = (*redis.Ring)(nil)
	_ RedisClient = (redis.UniversalClient)(nil)
)

// Options configure a Cache. A nil *Options means all defaults. Durations
// above 100 years (math.MaxInt64 is a common "forever") count as 100 years.
type Options struct {
	// Namespace prefixes every key the cache writes: a value for key K is
	// stored at "Namespace:{K}", its rebuild lock at "Namespace:{K}:lock"
	// (one Redis Cluster slot), and announcements go to the channel
	// "Namespace:{K}:ann" in the same slot ("Namespace:announce" with
	// Broadcast). A K longer than 128 bytes, starting with "#",
	// or holding braces, spaces or bytes that are not printable ASCII is
	// replaced by "#" and the hex SHA-256 of K (a cryptographic hash, so
	// that nobody who chooses keys can make two share an entry). It must
	// not contain braces. Default: "stampede".
	Namespace string

	// Expiry says how long entries are fresh, stale and remembered as not
	// found, and how they are refreshed (see ExpiryPolicy). The zero value
	// means the defaults of each field.
	Expiry ExpiryPolicy

	// LockTTL is the TTL of the rebuild lock; it is kept alive while the
	// loader runs, so it only bounds how long others wait for a rebuilder
	// that died. Default: 5s.
	LockTTL time.Duration

	// LoadTimeout bounds each loader call. Default: 10s.
	LoadTimeout time.Duration

	// WaitTimeout bounds how long a miss waits for another process that is
	// loading the value (a caller's own ctx may end its wait sooner).
	// Default: 10s.
	WaitTimeout time.Duration

	// LoadOnWaitTimeout makes a caller that waited WaitTimeout in vain run
	// the loader itself (without storing the result) instead of returning
	// ErrWaitTimeout. Default: false.
	LoadOnWaitTimeout bool

	// PollInterval is how often a waiter re-reads the key in case an
	// announcement was lost; it is also how long waiters take to notice a
	// rebuild when the server refuses the announcement channel (see
	// Stats.AnnounceDenied). Default: 200ms, or WaitTimeout if shorter.
	PollInterval time.Duration

	// FailOpenCooldown is how long the cache stops talking to a server
	// that could not be reached; loaders run directly meanwhile (at most
	// 100 years: "never again until restarted"). Default: 1s.
	FailOpenCooldown time.Duration

	// MaxValueSize is the largest encoded value stored. Default: 4 MiB.
	MaxValueSize int

	// DigestThreshold is the size above which conditional writes compare a
	// digest instead of the value. Default: 512 bytes.
	DigestThreshold int

	// Codec encodes values. Default: Msgpack.
	Codec Codec

	// Logger receives server errors (each kind once per FailOpenCooldown,
	// so running without the server is said once, not per call), failed
	// background refreshes, and refusals by the server (the announcement
	// channel, CLIENT TRACKING), each once. Routine events go to
	// Observer only. Default: nil, slog.Default().
	Logger *slog.Logger

	// Observer, if set, is called for every Event, synchronously and
	// outside any lock; it must be fast and must not call the Cache.
	// Default: nil.
	Observer func(Event)

	// Now returns the current time. Default: time.Now.
	Now func() time.Time

	// Broadcast announces every rebuild, Set and Delete of the namespace on
	// one channel, "Namespace:announce" (classic PUBLISH), to which every
	// Cache of the namespace subscribes for its whole life, as versions
	// before per-key announcements did: every process then receives every
	// write's message, whether or not it waits for that key. Without it a
	// write is announced on its key's own channel, "Namespace:{K}:ann"
	// (SPUBLISH in the key's slot where the server has sharded pub/sub,
	// PUBLISH otherwise), which only processes waiting for that key
	// subscribe to, while they wait and for about ten seconds after.
	//
	// Processes announcing one way do not hear those announcing the other:
	// their waiters still get every value, by their poll (PollInterval).
	// Set Broadcast on every process while a fleet runs versions before
	// per-key announcements next to this one (a rolling upgrade), and
	// remove it once none is left. Default: false, per-key announcements.
	Broadcast bool

	// TagLifetime is how long a tag's record (see WithTags) lives after
	// it was made or last invalidated. A value that outlives its tags'
	// records reads as invalidated once a record ends, and is loaded
	// again: keep it above the values' lifetime (Fresh + Stale). Records
	// are made only for the tags that calls give, so their number is
	// bounded by the tags in use within a TagLifetime. Default: 24h; at
	// least 1s.
	TagLifetime time.Duration

	// Backends caps, by backend name, how many loads run at once against
	// each backend, counting every process of the namespace: a load for a
	// named backend (WithBackend, or Backend) takes one of its permits
	// once it holds its key's claim, before its loader runs, and gives it
	// back when the loader returns. A load that finds them all held
	// waits, at most its WaitTimeout, then fails with ErrBackendBusy; a
	// background refresh waits while its stale value is served. Every
	// process must give the same caps: each compares the permits held with
	// its own. A name must be non-empty and a cap at least 1. See
	// docs/backends.md. Default: nil, no cap.
	Backends map[string]int

	// Backend is the backend of every load that names none with
	// WithBackend; it must be a name in Backends. Default: "", loads are
	// not capped.
	Backend string

	// Near, if set, keeps recently read entries in this process as well,
	// so that a hit costs a map lookup instead of a round trip, and keeps
	// them coherent with the server (see Near). Default: nil, every read
	// goes to the server.
	Near *Near
}

// ExpiryPolicy is a Cache's expiry and refresh policy (Options.Expiry):
// how long entries are fresh, stale and remembered as not found, and how
// they are refreshed. Each zero field means its default.
//
// The fields work together. A loaded value is fresh for Fresh, less a
// random fraction of up to Jitter. With EarlyRefresh, a hit on a fresh
// value may refresh it in the background shortly before Fresh ends. Past
// Fresh the value is served stale for up to Stale more while one process in
// the whole cluster reloads it; once that ends the server drops it. A
// background refresh that fails is not retried by any process for
// RefreshBackoff, and the value is served meanwhile. A loader's
// loader.ErrNotFound is remembered for Negative. WithExpiry and
// WithNegative override Fresh, Stale and Negative for one call, and a
// loader may set its own value's lifetime (LoadWithExpiry).
type ExpiryPolicy struct {
	// Fresh is how long a loaded value is fresh. Values above 100 years
	// (math.MaxInt64 for "forever") are clamped to 100 years.
	// Default: 1 minute.
	Fresh time.Duration

	// Stale is how long after Fresh a value may still be served while one
	// caller in the whole cluster reloads it in the background. The server
	// drops the key after Fresh+Stale, which is clamped to 100 years, so
	// math.MaxInt64 means "stale until 100 years after it was written".
	// Zero disables stale serving. Default: 0.
	Stale time.Duration

	// Jitter shortens each entry's Fresh time by a random fraction of up to
	// Jitter, so that keys written together do not expire together.
	// Must be in [0, 1). Default: 0.
	Jitter float64

	// Negative is how long a loader.ErrNotFound result is remembered
	// (at most 100 years). Zero means not at all: the loader runs again on
	// the next call. Default: 0.
	Negative time.Duration

	// EarlyRefresh is the XFetch beta: with beta > 0 a fresh hit refreshes
	// the value in the background with a probability that grows as expiry
	// nears, in proportion to how long the last load took (1 is the
	// paper's choice). Zero disables it. Default: 0.
	EarlyRefresh float64

	// RefreshBackoff is how long no process retries a background refresh
	// that failed (the stale value is served meanwhile). Values above 100
	// years are clamped to 100 years. Default: 1s.
	RefreshBackoff time.Duration
}

// Near configures the near cache: a bounded in-process tier in front of
// the server, for GetOrLoad, Get and package middleware.
//
// An entry leaves every process's near cache when its value changes on
// the server, whoever changed it (a rebuild, a refresh, Set, Delete, the
// server's expiry or eviction, or any other client): each process fills
// its near cache through connections of its own with CLIENT TRACKING on,
// redirected to a tracking connection per node, so the server tells it of
// the keys it read, and of no others (on a Ring, whose shard for a key is
// not exposed, it is told of every key of the namespace: BCAST). Fill
// reads do not go through the client given to New: its hooks do not see
// them. Fresh, stale and missing are decided from the entry's own times,
// as for values read from the server, so a stale entry still triggers the
// one cluster-wide refresh and is served meanwhile.
//
// The near cache only answers while the server is known to be sending
// invalidations: the tracking connection is pinged every Lease/4, and an
// entry is served only if a ping sent less than Lease ago was answered.
// A lost or reset tracking connection, a server restart, a change of the
// Cluster's masters (a node that no longer owns its slots answers the
// pings' probe with MOVED) or a lapse of the Lease empties the near cache; reads
// go to the server until invalidations flow again. On servers without
// CLIENT TRACKING (miniredis, or an ACL that refuses it) the near cache
// stays off and every read goes to the server (see NearActive); it asks
// again every minute, with a warning once per reply and a line when it is
// on again. A passing reply (BUSY, LOADING) only delays it.
//
// Values served from the near cache are shared: every hit on an entry
// returns the same decoded value, so a value holding a slice, map or
// pointer must not be modified by its callers.
type Near struct {
	// MaxEntries bounds the number of entries.
	MaxEntries int

	// MaxBytes bounds the entries' stored (encoded) size in bytes, plus
	// 64 bytes per entry; decoded values are not counted. With both
	// MaxEntries and MaxBytes set, both bounds hold. At least one of them
	// must be set.
	MaxBytes int64

	// Lease is how long after the last sign of life of the tracking
	// connection entries are still served: it bounds how long a value
	// changed on the server can still be served here when invalidations
	// stop arriving without the connection failing (a network partition).
	// Default: 1s; at least 10ms.
	Lease time.Duration
}

// maxExpiry is the longest expiry the cache gives an entry: 100 years.
// Expiry.Fresh, Expiry.Stale and Expiry.Negative set larger (math.MaxInt64
// is a common "forever"), per call or by a loader, are clamped to it, and
// so is the server's expiry Fresh+Stale; the server refuses expiries that
// overflow when added to its clock, and a Duration sum would wrap around
// first. LockTTL, Expiry.RefreshBackoff and FailOpenCooldown are clamped
// to it too (the
// end of a cool-down must fit in Unix nanoseconds, which end in 2262).
const maxExpiry = 100 * 365 * 24 * time.Hour

// addSat returns the sum of non-negative durations, saturating at the
// largest Duration instead of wrapping around.
func addSat(ds ...time.Duration) time.Duration {
	var sum time.Duration
	for _, d := range ds {
		if d > math.MaxInt64-sum {
			return math.MaxInt64
		}
		sum += d
	}
	return sum
}

// settings are Options with defaults applied.
type settings struct {
	ns                                           string
	ttl, stale, negative, lockTTL                time.Duration
	loadTimeout, waitTimeout, poll, backoff, off time.Duration
	jitter, beta                                 float64
	loadOnWaitTimeout                            bool
	maxSize, digest                              int
	codec                                        Codec
	logger                                       *slog.Logger
	observer                                     func(Event)
	now                                          func() time.Time
	realClock                                    bool // Options.Now is not set
	near                                         *Near
	broadcast                                    bool
	tagLife                                      time.Duration
	backends                                     map[string]int // Options.Backends, copied
	backend                                      string         // Options.Backend
	item                                         itemSettings   // a call's settings given no options; checked
}

func or[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// settings returns the settings of o (nil: every default), or lock.ErrInvalid
// for the first option out of range.
func (o *Options) settings() (settings, error) {
	if o == nil {
		o = &Options{}
	}
	s := o.defaults()
	if err := o.checkDurations(); err != nil {
		return s, err
	}
	if err := s.check(o); err != nil {
		return s, err
	}
	if err := s.checkBackends(); err != nil {
		return s, err
	}
	s.item = itemSettings{fresh: s.ttl, stale: s.stale, negative: s.negative, wait: s.waitTimeout, backend: s.backend}
	if err := s.item.check(); err != nil {
		return s, err // the checks above rule this out: calls without options check nothing (see loadItem)
	}
	if o.Near != nil {
		near, err := nearSettings(o.Near)
		if err != nil {
			return s, err
		}
		s.near = near
	}
	return s, nil
}

// defaults returns o's settings with every zero option at its default,
// before any check.
func (o *Options) defaults() settings {
	s := settings{
		ns:                or(o.Namespace, "stampede"),
		ttl:               or(o.Expiry.Fresh, time.Minute),
		stale:             o.Expiry.Stale,
		negative:          o.Expiry.Negative,
		lockTTL:           min(or(o.LockTTL, 5*time.Second), maxExpiry),
		loadTimeout:       or(o.LoadTimeout, 10*time.Second),
		waitTimeout:       or(o.WaitTimeout, 10*time.Second),
		poll:              o.PollInterval,
		backoff:           min(or(o.Expiry.RefreshBackoff, time.Second), maxExpiry),
		off:               min(or(o.FailOpenCooldown, time.Second), maxExpiry), // its end must fit Unix nanoseconds
		jitter:            o.Expiry.Jitter,
		beta:              o.Expiry.EarlyRefresh,
		loadOnWaitTimeout: o.LoadOnWaitTimeout,
		broadcast:         o.Broadcast,
		maxSize:           or(o.MaxValueSize, 4<<20),
		digest:            or(o.DigestThreshold, redisx.DefaultDigestThreshold),
		codec:             o.Codec,
		logger:            o.Logger,
		observer:          o.Observer,
		now:               o.Now,
		near:              o.Near,
		tagLife:           min(or(o.TagLifetime, 24*time.Hour), maxExpiry),
		backends:          maps.Clone(o.Backends),
		backend:           o.Backend,
	}
	if s.codec == nil {
		s.codec = Msgpack
	}
	if s.poll == 0 {
		s.poll = min(200*time.Millisecond, s.waitTimeout)
	}
	if s.now == nil {
		s.now, s.realClock = time.Now, true
	}
	return s
}

// checkDurations rejects a negative duration option, or one below a
// millisecond (zero is the default).
func (o *Options) checkDurations() error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"Expiry.Fresh", o.Expiry.Fresh}, {"Expiry.Stale", o.Expiry.Stale}, {"Expiry.Negative", o.Expiry.Negative},
		{"LockTTL", o.LockTTL}, {"LoadTimeout", o.LoadTimeout}, {"WaitTimeout", o.WaitTimeout},
		{"PollInterval", o.PollInterval}, {"Expiry.RefreshBackoff", o.Expiry.RefreshBackoff},
		{"FailOpenCooldown", o.FailOpenCooldown}, {"TagLifetime", o.TagLifetime}} {
		if d.v < 0 {
			return invalid("%s %v is negative", d.name, d.v)
		}
		if d.v > 0 && d.v < time.Millisecond {
			return invalid("%s %v is below 1ms", d.name, d.v)
		}
	}
	return nil
}

// check rejects settings s, made from o by defaults, that are out of
// range or contradict each other.
func (s *settings) check(o *Options) error {
	switch {
	case strings.ContainsAny(s.ns, "{}") || !printable(s.ns):
		return invalid("Namespace %q must be printable and without braces", s.ns)
	case math.IsNaN(s.jitter) || s.jitter < 0 || s.jitter >= 1:
		return invalid("Expiry.Jitter %v is outside [0, 1)", s.jitter)
	case math.IsNaN(s.beta) || math.IsInf(s.beta, 0) || s.beta < 0:
		return invalid("Expiry.EarlyRefresh %v must be a non-negative number", s.beta)
	case o.MaxValueSize < 0:
		return invalid("MaxValueSize %d is negative", o.MaxValueSize)
	case o.DigestThreshold < 0:
		return invalid("DigestThreshold %d is negative", o.DigestThreshold)
	case s.poll > s.waitTimeout:
		return invalid("PollInterval %v exceeds WaitTimeout %v", s.poll, s.waitTimeout)
	case s.lockTTL < 10*time.Millisecond:
		return invalid("LockTTL %v is below 10ms: it could not be kept alive", s.lockTTL)
	case s.tagLife < time.Second:
		return invalid("TagLifetime %v is below 1s", s.tagLife)
	}
	return nil
}

// checkBackends rejects Options.Backends and Options.Backend that name
// no backend or cap nothing.
func (s *settings) checkBackends() error {
	for _, name := range slices.Sorted(maps.Keys(s.backends)) {
		switch n := s.backends[name]; {
		case name == "":
			return invalid("Backends has an empty backend name")
		case n < 1:
			return invalid("Backends[%q] %d is below 1", name, n)
		}
	}
	if _, ok := s.backends[s.backend]; s.backend != "" && !ok {
		return invalid("Backend %q is not a name in Backends", s.backend)
	}
	return nil
}

// nearSettings checks n and returns a copy of it with its defaults.
func nearSettings(n *Near) (*Near, error) {
	switch {
	case n.MaxEntries < 0:
		return nil, invalid("Near.MaxEntries %d is negative", n.MaxEntries)
	case n.MaxBytes < 0:
		return nil, invalid("Near.MaxBytes %d is negative", n.MaxBytes)
	case n.MaxEntries == 0 && n.MaxBytes == 0:
		return nil, invalid("Near needs MaxEntries or MaxBytes")
	case n.Lease < 0 || n.Lease > 0 && n.Lease < 10*time.Millisecond:
		return nil, invalid("Near.Lease %v is below 10ms", n.Lease)
	}
	cp := *n
	cp.Lease = min(or(cp.Lease, time.Second), maxExpiry)
	return &cp, nil
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// LoadOption changes the settings of one GetOrLoad or GetOrLoadMany call.
// A nil LoadOption is skipped. An option keeps no state of its own: one
// value may be given to many calls, also concurrently.
type LoadOption interface {
	applyLoad(itemSettings) itemSettings
}

// SetOption changes the settings of one Set call. A nil SetOption is
// skipped.
type SetOption interface {
	applySet(itemSettings) itemSettings
}

// Option changes the settings of any call that takes options: GetOrLoad,
// GetOrLoadMany and Set. Options that apply to loads only are
// LoadOptions, so that giving one to Set does not compile.
type Option interface {
	LoadOption
	SetOption
}

// loadOption is a LoadOption; anyOption is an Option. They take and
// return the settings by value, not by address: an address handed to a
// function value or an interface method escapes, and the settings of a
// call with options would then be allocated on every call, hits
// included.
type (
	loadOption func(itemSettings) itemSettings
	anyOption  func(itemSettings) itemSettings
)

func (o loadOption) applyLoad(s itemSettings) itemSettings { return o(s) }
func (o anyOption) applyLoad(s itemSettings) itemSettings  { return o(s) }
func (o anyOption) applySet(s itemSettings) itemSettings   { return o(s) }

type itemSettings struct {
	fresh, stale, negative, wait time.Duration
	tags                         []string // WithTags
	backend                      string   // WithBackend, or Options.Backend; "": not capped
	// queue, set by a Batcher's calls (viaQueue), takes the background
	// refreshes of the call in place of refresh and refreshMany.
	queue *refreshQueue
	// round: the load's loader joins a Batcher's load round (Get), whose
	// one loader call takes the backend's permit for all its keys.
	round bool
}

// unlessRound is it for the permit of a load of one key: without a
// backend when the load's loader joins a Batcher's round, which takes the
// permit itself (see loadRounds.get).
func (it itemSettings) unlessRound() itemSettings {
	if it.round {
		it.backend = ""
	}
	return it
}

// WithExpiry sets this value's lifetime, in place of the Cache's
// ExpiryPolicy.Fresh and Stale: fresh for e.Fresh, then served stale for
// e.Stale while it is reloaded. A zero e.Fresh keeps the policy's (both
// Fresh and Stale), as a zero Expiry returned by a LoadWithExpiry loader
// does. e.Fresh must be at least 1ms and e.Stale not negative; both are
// clamped as ExpiryPolicy's are (at most 100 years). A LoadWithExpiry
// loader's Expiry overrides this one.
func WithExpiry(e Expiry) Option {
	return anyOption(func(s itemSettings) itemSettings {
		if e.Fresh != 0 {
			s.fresh, s.stale = e.Fresh, e.Stale
		}
		return s
	})
}

// WithNegative sets how long a not-found result (loader.ErrNotFound) of
// this call's load is remembered, in place of ExpiryPolicy.Negative;
// zero remembers nothing. It must not be negative (at most 100 years).
func WithNegative(d time.Duration) LoadOption {
	return loadOption(func(s itemSettings) itemSettings { s.negative = d; return s })
}

// WithWaitTimeout sets how long this call waits for another process's
// load, in place of Options.WaitTimeout. It must be at least 1ms.
func WithWaitTimeout(d time.Duration) LoadOption {
	return loadOption(func(s itemSettings) itemSettings { s.wait = d; return s })
}

// WithBackend names the backend this call's load runs against, in place
// of Options.Backend: the load takes one of the backend's permits (see
// Options.Backends) before its loader runs. The name must be one of
// Options.Backends; "" runs the load without a cap. It changes nothing
// for a call that finds a value, nor for one that waits for another
// process's load, whose own backend applies.
func WithBackend(name string) LoadOption {
	return loadOption(func(s itemSettings) itemSettings { s.backend = name; return s })
}

// WithTags stores the value with tags, which InvalidateTag and
// SoftInvalidateTag invalidate together, in every process: give the same
// tags to every call for a key, as a load or Set without them stores an
// untagged value. A tag is any non-empty string of at most 1024 bytes, and
// a value has at most 64 (repeats count once). Each tag read or written
// with a value costs a small record on the server (see
// Options.TagLifetime), and a value whose tags' records are not in the
// near cache costs one more round trip when it is read, and one before
// it is loaded (see docs/invalidation.md).
func WithTags(tags ...string) Option {
	var set []string
	for _, t := range tags {
		if !slices.Contains(set, t) {
			set = append(set, t)
		}
	}
	return anyOption(func(s itemSettings) itemSettings { s.tags = set; return s })
}

// sameItem is a LoadOption giving a call the settings it of another:
// a GetOrLoadMany key that goes through GetOrLoad keeps its call's.
type sameItem itemSettings

func (o sameItem) applyLoad(itemSettings) itemSettings { return itemSettings(o) }

type storedKey struct{}

// onStored returns ctx carrying fn, to be called once a load started by
// a call with that ctx has been written to the server (see
// engine.View.OnStored).
func onStored(ctx context.Context, fn func()) context.Context {
	return context.WithValue(ctx, storedKey{}, fn)
}

// storedNotice calls the fn that ctx, the context of the call that started a
// load, carries (onStored), if any, once that load was written.
func storedNotice(ctx context.Context) {
	if fn, _ := ctx.Value(storedKey{}).(func()); fn != nil {
		fn()
	}
}

// loadItem and setItem return the settings of a load's or a Set's call,
// checked. Options take and return the settings by value (see
// loadOption), so that they stay off the heap.
//
// A call without options (most, and every hit of a hot path) takes the
// Cache's own settings, which New checked (see Options.settings): this
// part is inlined, and checks nothing again.
func (c *Cache) loadItem(opts []LoadOption) (itemSettings, error) {
	if len(opts) == 0 {
		return c.s.item, nil
	}
	return c.loadItemWith(opts)
}

// loadItemWith is loadItem of a call with options.
func (c *Cache) loadItemWith(opts []LoadOption) (itemSettings, error) {
	it := withLoad(c.s.item, opts)
	if _, ok := c.s.backends[it.backend]; it.backend != "" && !ok {
		return it, invalid("WithBackend %q is not a name in Options.Backends", it.backend)
	}
	return it, it.check()
}

func (c *Cache) setItem(opts []SetOption) (itemSettings, error) {
	it := c.s.item
	if len(opts) > 0 {
		it = withSet(it, opts)
	}
	return it, it.check()
}

func withLoad(it itemSettings, opts []LoadOption) itemSettings {
	for _, o := range opts {
		if o != nil {
			it = o.applyLoad(it)
		}
	}
	return it
}

func withSet(it itemSettings, opts []SetOption) itemSettings {
	for _, o := range opts {
		if o != nil {
			it = o.applySet(it)
		}
	}
	return it
}

// check rejects settings that options put out of range.
func (it itemSettings) check() error {
	switch {
	case it.fresh < time.Millisecond:
		return invalid("WithExpiry: Fresh %v is below 1ms", it.fresh)
	case it.stale < 0:
		return invalid("WithExpiry: Stale %v is negative", it.stale)
	case it.negative < 0:
		return invalid("WithNegative %v is negative", it.negative)
	case it.wait < time.Millisecond:
		return invalid("WithWaitTimeout %v is below 1ms", it.wait)
	}
	if why := checkTags(it.tags); why != "" {
		return invalid("WithTags: %s", why)
	}
	return nil
}

type expiryKey struct{}

// expiry is where expire leaves a loader's choice of TTLs.
type expiry struct {
	set          bool
	fresh, stale time.Duration
}

// expire sets, from inside a loader, the lifetime of the value it is
// about to return (see engine.View.Expire): LoadWithExpiry's loader and
// package middleware set it. It reports whether ctx belongs to a load
// whose result will be stored.
func expire(ctx context.Context, fresh, stale time.Duration) bool {
	e, _ := ctx.Value(expiryKey{}).(*expiry)
	if e == nil {
		return false
	}
	e.set, e.fresh, e.stale = true, max(fresh, time.Millisecond), max(stale, 0)
	return true
}
