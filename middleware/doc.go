// Package middleware caches HTTP responses in a cache.Cache shared by many
// processes, as net/http middleware that fits chi:
//
//	c, _ := cache.New(rdb, nil)
//	r := chi.NewRouter()
//	r.With(middleware.Cache(c, time.Minute)).Get("/report", report)
//
// # Stampede protection
//
// One request per key in the whole cluster renders a missing or expired
// response; concurrent requests, in this process and others, wait for it
// and are answered with its response (or with the stale one, within the
// response's stale window). The render runs in the goroutine of the request
// that won, so it can stream to its client; after WaitTimeout the others
// render for themselves, as nginx's proxy_cache_lock_timeout does.
//
// The render's context has the request's values and deadline but not its
// client's cancellation: a client that goes away does not end the render
// the others wait for (it ends with the cache's LoadTimeout then), while
// the application's own deadline for the request (http.TimeoutHandler,
// chi's middleware.Timeout, a context.WithTimeout) ends it, and what it
// wrote then is not stored.
//
// # What is stored
//
// Only what a shared cache may store (RFC 9111): GET and HEAD requests
// without Authorization (and, by default, without Cookie), without a body
// and with a target in origin form or absolute form with "//" and no user
// information; responses with a storable status that are not no-store,
// private or no-cache (nor, without Cache-Control, Pragma: no-cache), set
// no cookie, declare or set no trailer and do not say Vary: *, header
// names read in any letter case. s-maxage, then max-age, then Expires
// (less Date), then (with Options.Freshness.Heuristic, for a response with
// Last-Modified) a fraction of the time since Last-Modified, then
// Options.Freshness.Fresh give the freshness lifetime (an Expires that is invalid or
// not in the future is not stored), counted from the
// response's age when received (RFC 9111 4.2.3: its Age field, or the
// time since its Date if that is more; of Age the first member of the
// first line counts, and one that is not a non-negative integer is
// ignored, RFC 9111 5.1; dates are read in the three forms of RFC 9110
// 5.6.7 exactly): a response older than its lifetime
// is not stored, and every answer's Age counts its age. The response's
// Date is kept (one is added if it has none);
// stale-while-revalidate and stale-if-error (RFC 5861) give the stale
// window (none with must-revalidate or proxy-revalidate; with s-maxage,
// only the response's own). A response with the handler's ETag or
// Last-Modified is kept past its stale window for Options.Freshness.Revalidate and
// then revalidated, never served without it: one render in the cluster
// gets If-None-Match / If-Modified-Since from the stored response, and a
// 304 freshens it (its fields replace the stored ones but those describing
// the body, and the result passes the storage rules again); it is written
// only if the key still holds the response that was revalidated.
// Options.Freshness.StaleIfError keeps a response (with or without
// validators) that long past its stale window to answer in place of a
// refresh that fails (a 5xx, a timeout; never for must-revalidate,
// proxy-revalidate, no-cache or s-maxage), after that render, never
// instead of it.
// Options.Freshness.RevalidateNoCache stores no-cache responses with a validator to
// revalidate them on every use. Options.Freshness.Explicit stores only
// responses that state their freshness, of any final status but 206
// and 5xx (501 aside), as a shared cache in front of an origin does;
// Options.SurrogateControl honours Surrogate-Control, and Options.Targeted
// targeted fields such as CDN-Cache-Control (RFC 9213), which take the
// place of Cache-Control and Expires when valid. SharedOptions sets
// these and the other fields a shared cache in front of an origin needs
// together. A response with
// Vary is stored under its variant's key; the plain key then holds a
// marker naming the Vary headers, which is never served. Responses that hijack, panic or
// answer 5xx are passed through and never stored; bodies over
// Options.StoreLimit (which must fit the cache's MaxValueSize) stream
// through without being buffered whole. A flush is a hint, not a refusal
// to be stored: a response that may be stored is kept until the handler
// returns and stored if it is complete within StoreLimit (so a chunked
// response through httputil.ReverseProxy, which flushes after every
// write, is stored); one that is never stored (an event stream,
// Content-Type text/event-stream, or one the rules refuse by its status
// and header at the flush) streams to its client as it is written.
//
// # The key
//
// "GET " + scheme (from the connection) + "://" + host (lower case, no
// default port unless bracketed) + escaped path and query as the client
// sent them (r.RequestURI, not a path an outer http.StripPrefix
// shortened), the query sorted by name with each name's values in their
// order, minus Options.Keys.IgnoreQuery (or only Options.Keys.Query); then
// r.URL's scheme and host if an outer middleware set them, r.URL's path
// and query if it rewrote them, Options.Keys.Headers, and the request's values of the
// headers the response named in Vary. The handler rendering for the cache
// sees no body (nor Content-Type or Content-Length, nor a parsed form),
// no query parameter outside the key, no conditional or range header
// (If-None-Match, If-Modified-Since, ...) and no header that rewrites
// hosts, URLs or methods (X-Forwarded-Host, X-Original-URL,
// X-HTTP-Method-Override, ...), so none of them can shape what others
// receive.
//
// Answers carry Age, X-Cache (HIT, MISS, STALE or BYPASS), Cache-Status
// (the middleware's member after those of the origin and caches before
// it) and an ETag (the handler's, or a digest of the body); for a stored 2xx,
// If-None-Match (or, without it, If-Modified-Since) is answered with 304.
// A GET with one byte range (Range: bytes=a-b, a- or -n) takes the path
// of any GET (a hit, a stale hit, or a share of the one render of its
// key) and is answered from the stored 200 with a 206 of that part (a 416
// if it lies past the end; the whole response for several or malformed
// ranges, or an If-Range that does not hold). A render that cannot be
// stored answers no range: the client is then rendered alone, with its
// Range.
//
// # Invalidation
//
// A request with a method not known to be safe (POST, PUT, DELETE, PATCH,
// anything but GET, HEAD, OPTIONS and TRACE) answered with a 2xx or 3xx
// status deletes, before its response reaches the client and in every
// process, the stored responses of a GET of its target URL and of its
// response's Location and Content-Location URLs on the same host (RFC
// 9111 4.4), Vary variants included. Anybody who can make such a
// request succeed can evict that page, at the cost of one shared render;
// Options.NoInvalidation turns it off.
//
// # Near cache
//
// Over a Cache with a near cache (cache.Options.Near), a hit is answered
// from process memory: no round trip, and the stored response is decoded
// once per entry, not per hit. The near cache is as coherent as
// the cache's: a page rendered again, refreshed, purged with
// cache.Delete (the key is described under "The key") or expired in any
// process stops being served by every other process once the server's
// invalidation reaches it, and at once by the process that changed it.
// Hits share one decoded response, which the middleware never modifies:
// what it hands to the ResponseWriter is a copy.
//
// # Observing
//
// Options.Observer receives an Event for every request answered (hit,
// stale, miss, bypass with its reason, canceled) and every render finished
// in the background, labelled with the chi route pattern where there is
// one, with the request's method, the status it was answered with and its
// context (for a span's parent); Options.Logger gets the reasons at debug
// level. The cache's Stats
// count the same requests: HITs and STALEs as hits and stale hits, the
// rest that reached the cache as misses. The shape is the one of package
// cache (and lock): see Event.
package middleware
