package middleware

import (
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/hotkv/stampede/internal/httprule"
)

// Options configure a Middleware. A nil *Options means all defaults,
// which suit a cache inside an application; SharedOptions returns those
// of a shared cache in front of an origin.
type Options struct {
	// Freshness decides how long a response is fresh, how long it may be
	// served stale, and how long it is kept to be revalidated.
	Freshness FreshnessPolicy

	// Keys decides the key a request is stored under, and which of its
	// query parameters and headers the handler sees when it renders for
	// the cache.
	Keys KeyPolicy

	// StoreLimit is the largest body stored; larger bodies stream through
	// without being buffered whole and are not stored. A handler's flush
	// does not change that: it is a hint, and a response that may be
	// stored is held (nothing sent) until it completes within StoreLimit
	// or outgrows it; only one that is never stored (an event stream, or
	// one the rules refuse by its status and header at the flush) streams
	// from the flush on. A stored response
	// is its body plus its headers, encoded by the cache's Codec, and must
	// fit the cache's MaxValueSize: New refuses a StoreLimit above
	// MaxValueSize less 16 KiB kept for the headers, and a response whose
	// headers need more than that room is not stored. Default: 1 MiB, or
	// 3/4 of that room if less (which leaves space for the JSON codec's
	// base64 too).
	//
	// NOTE: the check assumes the default Msgpack codec. With JSON, which
	// writes the body as base64 (4/3 of its size), keep StoreLimit at or
	// below 3/4 of (MaxValueSize - 16 KiB).
	StoreLimit int

	// WaitTimeout is how long a request waits for the render of the same
	// response by another request (in any process) before rendering
	// itself, as nginx's proxy_cache_lock_timeout. Default: 5s.
	WaitTimeout time.Duration

	// Statuses are the status codes that may be stored (a 304 or 412 never
	// is: it answers one request's conditions; a 206 never is: it is a
	// part of a response; a 5xx other than 501 never is, so that a failure
	// is not served beyond its own request).
	// Default: 200, 203, 204, 300, 301, 308, 404, 405, 410, 414, 501
	// (with Freshness.Explicit, see there).
	Statuses []int

	// ShouldCache, if set, decides instead of Statuses whether a response
	// with this status and header may be stored. The rules a shared cache
	// must follow (no-store, private, Set-Cookie, Vary: *; never a 5xx
	// other than 501, nor a 304 or 412, which answer one request's
	// conditions, nor a 206) apply either way. It may be asked more than
	// once for one response: at each flush of the handler's, with the
	// status and a copy of the header as they stand (a no streams the
	// response from there), and when the handler returns.
	ShouldCache func(status int, header http.Header) bool

	// SurrogateControl honours the response's Surrogate-Control field (as
	// a CDN does): its max-age gives the freshness lifetime before
	// s-maxage, max-age and Expires, and its no-store keeps the response
	// out of the cache. It never makes storable what Cache-Control
	// forbids (no-store, private, no-cache). Directives targeted at a
	// device ("max-age=60;cdn") are ignored. The field is passed on and
	// stored as it is, for a CDN in front. Off by default: an
	// application may set Surrogate-Control for its CDN only, with
	// lifetimes that rely on the CDN's purging. Default: false.
	SurrogateControl bool

	// Targeted names the targeted cache-control fields (RFC 9213) this
	// cache obeys, in order of precedence, such as "CDN-Cache-Control"
	// or a name of the deployment's own ("Stampede-Cache-Control"). Of a
	// response, the first of them that holds a valid Structured Fields
	// Dictionary governs storing and freshness as Cache-Control would,
	// and Cache-Control, Expires, Pragma and Surrogate-Control are then
	// ignored for it; a field that does not parse, or whose directive has
	// the wrong type (max-age="60"), is ignored as if absent. What the
	// cache never stores (a cookie, a 5xx, Vary: *, credentials) stays
	// unstored whatever the field says. The fields are passed on and
	// stored as they are, for a cache further on. Names are read in any
	// letter case. Default: none. SharedOptions sets CDN-Cache-Control.
	Targeted []string

	// Tags decides which response fields tag a page, for PurgeTag.
	Tags TagPolicy

	// Purge, if set, lets requests with the method PURGE remove pages
	// (see PurgePolicy). Default: nil, PURGE is a method like any other
	// unsafe one (see NoInvalidation).
	Purge *PurgePolicy

	// AllowNoCache lets a request's "Cache-Control: no-cache" force a new
	// render. Off by default: on a public endpoint anybody could force
	// renders at will. Default: false.
	AllowNoCache bool

	// CacheRequestsWithCookies caches requests that carry a Cookie header.
	// Off by default, because handlers often personalise responses by
	// cookie without saying so in Vary; turn it on only where cookies do
	// not change responses. Default: false.
	CacheRequestsWithCookies bool

	// NoInvalidation turns off invalidation on unsafe methods. By default
	// (RFC 9111 4.4), a request with a method not known to be safe (POST,
	// PUT, DELETE, PATCH, or any but GET, HEAD, OPTIONS and TRACE) that
	// is answered with a 2xx or 3xx status deletes, in every process and
	// before the response reaches its client, the stored responses of a
	// GET of its target URL and of the Location and Content-Location URLs
	// of the response that are on the same host (never another host's),
	// every Vary variant included, however many clients made (they are
	// reached through the URL's marker, which names their generation).
	// The keys are those a GET would have, with the request's own values
	// of Keys.Headers.
	//
	// WARNING: anybody who can send such a request that the handler
	// answers with a 2xx or 3xx can evict that URL's page: each eviction
	// costs at most one render, shared by every request that waits for
	// it. Handlers that answer every method with 200 invite it; set
	// NoInvalidation where writes do not go through this middleware or
	// where that render is too dear. Default: false (invalidation on).
	NoInvalidation bool

	// StatusHeader names the response header that says HIT, MISS, STALE or
	// BYPASS (and "PURGE; detail=..." on the answer to a PURGE, see
	// PurgePolicy); "-" leaves it out. Cache-Status (RFC 9211) is set on
	// every response the middleware serves or forwards, after the members
	// the response has already; the answer to a PURGE has none.
	// Default: "X-Cache".
	StatusHeader string

	// Logger receives, at debug level, every request that bypassed the
	// cache and every render whose response was not stored, with the
	// reason; at warning level, stores of a no-cache render that failed;
	// and, at error level, panics of Observer. Default: nil, no logging.
	Logger *slog.Logger

	// Observer, if set, is called with an Event for every request the
	// middleware answers and every render it finishes in the background,
	// synchronously, outside any lock and after the response was written;
	// it must be fast. A panic in it is recovered (and logged to Logger),
	// so it cannot break the response. Default: nil.
	Observer func(Event)

	// Now returns the current time. Default: time.Now.
	Now func() time.Time
}

// FreshnessPolicy is Options.Freshness: how long a response is fresh,
// stale and kept for revalidation, when its own fields do not say.
type FreshnessPolicy struct {
	// Fresh is how long a response is fresh when its Cache-Control has
	// neither s-maxage nor max-age and it has no Expires (unless
	// Explicit). Default: 1 minute.
	Fresh time.Duration

	// Explicit stores only responses that say how long they are
	// fresh (Cache-Control s-maxage or max-age, or Expires), as a shared
	// cache in front of an origin is usually set up: a response that
	// does not say is passed through and not stored, and Fresh is not
	// used. Since every stored response then carries its origin's word,
	// unless Options.Statuses or Options.ShouldCache is set it may have any final status
	// RFC 9111 allows (302, 307, 400, ... too), but 206, the 5xx other
	// than 501 (never stored, see Options.Statuses) and 304 and 412. With
	// Heuristic, a response whose freshness that heuristic gives
	// is stored too. Default: false, such responses are fresh for the duration Fresh
	// (the handler is the application's own, whose pages seldom say), with
	// the default list of Options.Statuses.
	Explicit bool

	// Heuristic, if above 0, is the fraction of the time since
	// its Last-Modified that a response is fresh when it does not say how
	// long it is (no s-maxage, max-age or Expires, nor Surrogate-Control's
	// max-age with Options.SurrogateControl): RFC 9111 4.2.2's heuristic, which
	// the published shared caches apply with 0.1 (a page last changed 10
	// hours ago is fresh for 1 hour). The time since Last-Modified is
	// counted up to the response's Date (or when it was received, without
	// a valid Date), and the lifetime is at most HeuristicMaxAge. It
	// applies only to the statuses RFC 9110 15.1 calls heuristically
	// cacheable (200, 203, 204, 206, 300, 301, 308, 404, 405, 410, 414,
	// 501) and to responses with Cache-Control public; the rules of a
	// shared cache (no 5xx but 501, no-store, private, Set-Cookie, ...),
	// Options.Statuses and Options.ShouldCache still decide what is stored at all. A
	// Last-Modified that is not one valid HTTP-date (or several that
	// disagree), or that is later than the Date, gives no heuristic. A
	// response the heuristic applies to takes its lifetime from it and
	// not from Fresh, and is stored even with Explicit; one it
	// gives no lifetime is fresh for the duration Fresh, or with Explicit not
	// stored. It must be between 0 and 1. Default: 0, no heuristic.
	Heuristic float64

	// HeuristicMaxAge caps the lifetime Heuristic gives (Squid
	// and Traffic Server cap it at a day). Default: 24 hours.
	HeuristicMaxAge time.Duration

	// Stale is how long after that a response may be served while one
	// render refreshes it, when its Cache-Control has no
	// stale-while-revalidate. Default: 0.
	Stale time.Duration

	// Revalidate is how long a stored response with a validator of the
	// handler's (an ETag it set, or a Last-Modified) is kept past its
	// freshness and stale window so that it can be revalidated (RFC 9111
	// 4.3): the next request for it makes one render in the cluster send
	// the handler If-None-Match / If-Modified-Since with the stored
	// validators, and a 304 freshens the stored response without the body
	// being made again. Meanwhile it is never served without that
	// revalidation. A handler that ignores the conditions answers 200 as
	// always. Negative turns this off: a response is dropped when its
	// stale window ends. Default: as long as the response is fresh, at
	// least 1 minute and at most 1 hour.
	Revalidate time.Duration

	// RevalidateNoCache stores responses with Cache-Control no-cache that
	// have an ETag or Last-Modified, to be revalidated (see Revalidate)
	// on every use: each request for one makes a conditional render,
	// shared by the requests that come meanwhile, and a 304 answers them
	// with the stored body (RFC 9111 5.2.2.4). Off by default: an
	// application may say no-cache meaning "do not store", and the body
	// is then given to every requester the handler answers 304, which is
	// right only where its validators identify the representation for
	// every one of them. It does nothing with a negative Revalidate.
	// Default: false, no-cache responses are not stored.
	RevalidateNoCache bool

	// StaleIfError is how long past its freshness and stale window a
	// stored response may still be served when the render that would
	// replace it fails (RFC 5861's stale-if-error, the cache's own, as
	// Varnish's grace and nginx's proxy_cache_use_stale error): the
	// handler answers 5xx (a reverse proxy's 502 or 504 when the origin
	// refused, closed or timed out), or the render outlasts WaitTimeout,
	// or fails in another process. The response is kept that long and,
	// in that time, never served without a render first (one in the
	// cluster, as a revalidation; see Revalidate): only its failure
	// serves it, with Cache-Status fwd=stale. Never for a response whose
	// Cache-Control says must-revalidate, proxy-revalidate, no-cache or
	// s-maxage (which implies proxy-revalidate). A response's own
	// stale-if-error is a grace too, and the longer of the two applies
	// (it is never part of its stale window: a healthy handler is asked
	// first). Default: 0, off: a
	// failed render's answer goes to its client.
	StaleIfError time.Duration
}

// KeyPolicy is Options.Keys: what a request's key is made of.
type KeyPolicy struct {
	// Func replaces the default key (method class, scheme, host, path
	// as received, sorted query); ok false bypasses the cache for the
	// request. The Vary headers of the response are still added to
	// whatever it returns, and IgnoreQuery or Query still decide which
	// query parameters the handler sees when it renders for the cache.
	// Set a Middleware with its own Func on a route to bound the
	// entries that route can make (e.g. key on the route's pattern and
	// one parameter). A key that begins with "tag\n" (the records of
	// Options.Tags) bypasses the cache. Default: nil.
	Func func(r *http.Request) (key string, ok bool)

	// IgnoreQuery names query parameters left out of the key (e.g.
	// "utm_source"). They are also removed from the request the handler
	// renders for the cache (from URL.RawQuery and RequestURI), since the
	// response is stored for requests without them. Requests that bypass
	// the cache keep them. Names are compared after unescaping, case
	// sensitively. Default: none.
	IgnoreQuery []string

	// Query, if set, is the allow-list of query parameters: only these
	// are in the key and passed to the handler rendering for the cache;
	// all others are removed, as IgnoreQuery removes its names. This
	// bounds how many entries random query strings can make for one path.
	// It may not be set together with IgnoreQuery. Default: none, every
	// parameter not in IgnoreQuery is keyed.
	Query []string

	// Headers names request headers added to the key and passed to the
	// handler (e.g. "X-Forwarded-Proto" behind a TLS proxy). Other
	// URL-rewriting headers (X-Forwarded-Host, X-Original-URL,
	// X-HTTP-Method-Override and the like) are removed from the request
	// the handler renders for the cache, and so are conditional and range
	// headers (If-None-Match, If-Modified-Since, ...) even if named here:
	// the middleware answers those itself. Default: none.
	Headers []string
}

// SharedOptions returns new Options for a shared cache in front of an
// origin, such as a caching reverse proxy (examples/proxy): what the
// published shared caches are set to, and the configuration the public
// HTTP cache test suite is scored with (docs/http-cache-tests.md). It
// sets eight fields and leaves every other at its default:
//
//   - Freshness.Explicit: only responses that say how long they are fresh
//     are stored, with any final status RFC 9111 allows;
//   - Freshness.Heuristic 0.1: or whose Last-Modified gives them a tenth
//     of its age, at most Freshness.HeuristicMaxAge (default a day);
//   - Freshness.RevalidateNoCache: no-cache responses with a validator are stored
//     and revalidated on every use;
//   - Freshness.StaleIfError 10 minutes: a response whose refresh fails
//     (the origin answers 5xx, refuses or closes the connection) is
//     served stale for up to ten minutes past its freshness, unless it
//     says must-revalidate, proxy-revalidate, no-cache or s-maxage;
//   - Targeted CDN-Cache-Control: the origin's CDN-Cache-Control
//     (RFC 9213) comes before its Cache-Control;
//   - SurrogateControl: the origin's Surrogate-Control is honoured;
//   - Tags.Headers Surrogate-Key and Cache-Tag: the origin's tags
//     register its pages for PurgeTag, and are not passed on;
//   - AllowNoCache: a client's no-cache forces a render;
//   - CacheRequestsWithCookies: requests with cookies are cached.
//
// Change any field of the result before passing it to New; each call
// returns a new *Options.
//
// WARNING: it caches requests that carry cookies and lets any client
// force a render. That is right in front of an origin that says what
// may be shared (Vary, private, Set-Cookie), as a proxy's origin must; for
// handlers that personalise by cookie without saying so, start from the
// defaults (nil Options) instead.
func SharedOptions() *Options {
	return &Options{
		Freshness:                FreshnessPolicy{Explicit: true, Heuristic: 0.1, RevalidateNoCache: true, StaleIfError: 10 * time.Minute},
		Targeted:                 []string{"CDN-Cache-Control"},
		SurrogateControl:         true,
		Tags:                     TagPolicy{Headers: []string{"Surrogate-Key", "Cache-Tag"}},
		AllowNoCache:             true,
		CacheRequestsWithCookies: true,
	}
}

// validate checks o, concern by concern, and returns the first error
// (prefixed "middleware: "), or nil. The concerns are asked in a fixed
// order, so that Options with several errors get the same one every
// time.
func (o *Options) validate() error {
	for _, check := range [...]func() error{o.Freshness.validate, o.validateLimits, o.validateStatuses, o.Keys.validate, o.validateTargeted, o.validateTags, o.Keys.validateQuery} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// validate checks the durations and the fraction of a FreshnessPolicy.
func (f *FreshnessPolicy) validate() error {
	switch {
	case f.Fresh < 0:
		return invalid("Freshness.Fresh %v is negative", f.Fresh)
	case f.Fresh > 0 && f.Fresh < time.Millisecond:
		return invalid("Freshness.Fresh %v is below 1ms", f.Fresh)
	case !(f.Heuristic >= 0 && f.Heuristic <= 1):
		return invalid("Freshness.Heuristic %v is not between 0 and 1", f.Heuristic)
	case f.HeuristicMaxAge < 0:
		return invalid("Freshness.HeuristicMaxAge %v is negative", f.HeuristicMaxAge)
	case f.Stale < 0:
		return invalid("Freshness.Stale %v is negative", f.Stale)
	case f.StaleIfError < 0:
		return invalid("Freshness.StaleIfError %v is negative", f.StaleIfError)
	}
	return nil
}

// validateLimits checks StoreLimit and WaitTimeout (StoreLimit against
// the cache's MaxValueSize is storeLimit's).
func (o *Options) validateLimits() error {
	switch {
	case o.StoreLimit < 0:
		return invalid("StoreLimit %d is negative", o.StoreLimit)
	case o.WaitTimeout < 0:
		return invalid("WaitTimeout %v is negative", o.WaitTimeout)
	case o.WaitTimeout > 0 && o.WaitTimeout < time.Millisecond:
		return invalid("WaitTimeout %v is below 1ms", o.WaitTimeout)
	}
	return nil
}

// validateStatuses checks that Statuses lists only final statuses that
// may be stored.
func (o *Options) validateStatuses() error {
	for _, s := range o.Statuses {
		if s < 200 || s > 599 {
			return invalid("status %d in Statuses is not a final status", s)
		}
		if s >= 500 && s != http.StatusNotImplemented {
			return invalid("status %d in Statuses: server errors are never stored", s)
		}
	}
	return nil
}

// validate checks that the names of a KeyPolicy are not empty.
func (k *KeyPolicy) validate() error {
	if slices.Contains(k.Headers, "") || slices.Contains(k.IgnoreQuery, "") {
		return invalid("empty name in Keys.Headers or Keys.IgnoreQuery")
	}
	if slices.Contains(k.Query, "") {
		return invalid("empty name in Keys.Query")
	}
	return nil
}

// validateQuery checks that a KeyPolicy does not set both Query and
// IgnoreQuery. Options.validate asks it last of all.
func (k *KeyPolicy) validateQuery() error {
	if len(k.Query) > 0 && len(k.IgnoreQuery) > 0 {
		return invalid("Keys.Query and Keys.IgnoreQuery are both set; use one: Keys.Query keys only the parameters it names")
	}
	return nil
}

// validateTargeted checks that the names of Targeted are header field
// names, and none is Cache-Control.
func (o *Options) validateTargeted() error {
	for _, n := range o.Targeted {
		switch {
		case !httprule.FieldName(n):
			return invalid("Targeted field name %q is not a header field name", n)
		case strings.EqualFold(n, "Cache-Control"):
			return invalid("Targeted field name %q: Cache-Control is the field a targeted one replaces", n)
		}
	}
	return nil
}

// validateTags checks Tags and Purge.
func (o *Options) validateTags() error {
	for _, n := range o.Tags.Headers {
		if !httprule.FieldName(n) {
			return invalid("Tags.Headers name %q is not a header field name", n)
		}
	}
	switch {
	case o.Tags.Lifetime < 0:
		return invalid("Tags.Lifetime %v is negative", o.Tags.Lifetime)
	case o.Tags.Lifetime > 0 && o.Tags.Lifetime < time.Second:
		return invalid("Tags.Lifetime %v is below 1s", o.Tags.Lifetime)
	case o.Tags.ClockSkew < 0:
		return invalid("Tags.ClockSkew %v is negative", o.Tags.ClockSkew)
	case o.Purge != nil && o.Purge.Authorize == nil:
		return invalid("Purge.Authorize is nil: a PURGE handler without an authoriser would let anybody purge")
	}
	return nil
}

// rules is the policy of the storage rules (httprule) that o sets, for
// a cache whose largest value is maxValue bytes. New calls it once o's
// defaults are in place.
func (o *Options) rules(maxValue int) httprule.Policy {
	f := &o.Freshness
	return httprule.Policy{
		Statuses: o.Statuses, ShouldCache: o.ShouldCache,
		SurrogateControl: o.SurrogateControl, Targeted: o.Targeted,
		TTL: f.Fresh, Explicit: f.Explicit, Heuristic: f.Heuristic, HeuristicMaxAge: f.HeuristicMaxAge,
		Stale: f.Stale, StaleIfError: f.StaleIfError,
		Revalidate: f.Revalidate, RevalidateNoCache: f.RevalidateNoCache,
		MaxSize: maxValue,
	}
}

// headerRoom is what a stored response keeps for everything but its
// body: status, header fields and the encoding's framing. StoreLimit may
// be at most the cache's MaxValueSize less this.
const headerRoom = 16 << 10

// storeLimit checks o.StoreLimit against the cache's largest value, or
// derives the default from it.
func (o *Options) storeLimit(maxValueSize int) (int, error) {
	room := maxValueSize - headerRoom
	if room <= 0 {
		return 0, invalid("the cache's MaxValueSize %d leaves no room for a response: a stored response needs up to %d bytes for its headers besides its body", maxValueSize, headerRoom)
	}
	if o.StoreLimit == 0 {
		return min(1<<20, room/4*3), nil
	}
	if o.StoreLimit > room {
		return 0, invalid("StoreLimit %d does not fit the cache's MaxValueSize %d (a stored response is its body plus up to %d bytes of headers); lower StoreLimit to at most %d or raise cache.Options.MaxValueSize", o.StoreLimit, maxValueSize, headerRoom, room)
	}
	return o.StoreLimit, nil
}

// TagPolicy is Options.Tags: which response fields tag a page, so that
// PurgeTag can remove every page of a tag at once.
type TagPolicy struct {
	// Headers names the response fields that list the tags of a page:
	// "Surrogate-Key" (Fastly, Varnish xkey) separates them by spaces,
	// "Cache-Tag" (Cloudflare) by commas; any other name by either. Every
	// line of each field counts. A page may have at most 128 tags, each
	// at most 1,024 bytes, with no control characters; a response that
	// lists more, or longer ones, is not stored. The fields are read in
	// any letter case. Default: none, no page is tagged (PurgeTag still
	// writes its records: a process that only purges needs no Headers).
	Headers []string

	// Keep passes the tag fields on to clients, and stores them with the
	// page, for a cache further on that purges by them too. Default:
	// false, they are removed from every response the middleware sends.
	Keep bool

	// Lifetime is how long a tag's record lives in the server after its
	// last purge. A record the first page of a tag made lives twice as
	// long as that page is kept (at least a minute), never longer than
	// Lifetime: a handler that builds tags from request input cannot make
	// clients fill the server with long-lived records. When a record
	// ends, every page of the tag renders once more, as after a purge.
	// Default: 24 hours.
	Lifetime time.Duration

	// ClockSkew bounds how far apart the clocks of the processes that
	// render and purge may be. A render of a page none of whose earlier
	// versions named a tag is stored only if it began more than
	// ClockSkew after that tag's last purge; otherwise it renders once
	// more. Default: 1 second.
	ClockSkew time.Duration
}

// PurgePolicy is Options.Purge: who may purge with the method PURGE.
//
// A PURGE request whose Authorize returns true removes, in every process
// and near caches included, either the pages of the tags it lists in the
// fields of Options.Tags.Headers (as a response lists them: "PURGE /
// HTTP/1.1" with "Surrogate-Key: product-1 product-2"), or, when it has
// none of those fields, the page of its own URL, every Vary variant
// included (a GET of the URL with the request's values of Keys.Headers),
// under both schemes as PurgeURL does. A tag field that lists no tag
// ("Surrogate-Key:") purges nothing and is answered 400 Bad Request
// (detail=purge-invalid), as are invalid tags. It is answered 200 with
// detail=purged-tags or detail=purged-url, and never reaches the handler.
// With the field "Fastly-Soft-Purge: 1" (exactly one field line) it is a
// soft purge instead (SoftPurgeURL, SoftPurgeTag): the pages are marked
// stale, served stale while one render revalidates them, and it is
// answered with detail=soft-purged-url or detail=soft-purged-tags;
// "Fastly-Soft-Purge: 0" is a hard purge, and any other value, an empty
// one or several field lines are answered 400 (detail=purge-invalid) and
// purge nothing.
// One that Authorize refuses is answered 403 Forbidden
// (detail=purge-forbidden) and purges nothing; a purge the server failed
// is answered 503 (detail=purge-failed).
//
// The answers are the middleware's own: they carry no Cache-Status (RFC
// 9211 2 leaves it to responses a cache forwarded or served), and the
// status header (Options.StatusHeader, X-Cache by default) says "PURGE;
// detail=" and the detail, e.g. "X-Cache: PURGE; detail=purged-url".
//
// The middleware answers a PURGE only where it runs before the router
// routes it: in chi, in the root router's r.Use. Where chi routes first
// (a group's r.Use, r.With, r.Route), mount PurgeHandler as a route.
type PurgePolicy struct {
	// Authorize decides whether r may purge, e.g. by a secret in a
	// header compared in constant time, or by the client's address on an
	// internal network. It must be set, and fast; r's body is not read.
	Authorize func(r *http.Request) bool
}
