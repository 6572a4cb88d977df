package middleware_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/codec"
	"github.com/hotkv/stampede/internal/testkit/faultproxy"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/middleware"
	"github.com/redis/go-redis/v9"
)

// This file puts network faults between the middleware and a real Redis 8
// (latency, spikes, dropped and reset connections, black holes, resume,
// the server killed and restarted) and checks that none of them ever
// produces a wrong response or one stored for another client. Each
// instance of the service (a Middleware+Cache pair with its own go-redis
// client) talks to the server through its own faultproxy, with short
// client timeouts; a testBed routes requests to the instances by
// procHeader.

// ---------------------------------------------------------------------------
// The site: responses that say exactly what they were rendered for

// Kinds of resource the fault site serves, by first path segment.
const (
	kindPublic  = "public"  // public, max-age=60; the same for every user
	kindVary    = "vary"    // Vary: X-User; one variant per user
	kindPrivate = "private" // Cache-Control: private; per user
	kindCookie  = "cookie"  // sets a per-user cookie
	kindAuth    = "auth"    // public, max-age=60, but shows the Authorization it got
	kindBig     = "big"     // 256 KiB, public
	kindSWR     = "swr"     // max-age=1, stale-while-revalidate=30
	kindMissing = "missing" // a 404 that may be stored
)

// bigSize is the payload of kindBig responses.
const bigSize = 256 << 10

// slowHeader asks the fault site for a render that takes slowRender. It
// is not part of any key and changes nothing in the response.
const (
	slowHeader = "X-Slow"
	slowRender = 30 * time.Millisecond
)

// faultKinds are the kinds with their weights in the random mix.
var faultKinds = []struct {
	kind   string
	weight int
}{
	{kindPublic, 24}, {kindVary, 20}, {kindPrivate, 10}, {kindCookie, 8},
	{kindAuth, 12}, {kindBig, 4}, {kindSWR, 10}, {kindMissing, 10},
}

// userDependent reports whether the site renders kind for the requesting
// user (X-User).
func userDependent(kind string) bool {
	return kind == kindVary || kind == kindPrivate || kind == kindCookie
}

// storable reports whether the middleware may store kind (for requests
// without Authorization and Cookie).
func storable(kind string) bool { return kind != kindPrivate && kind != kindCookie }

// faultRender is one run of the site's handler.
type faultRender struct {
	reqID                         string // the X-Req-Id of the request rendered for
	kind, path, query, user, auth string
	at                            int64 // Unix ms when the handler started
}

// faultSite is the handler behind the middleware. Every body starts with a
// line (URL-encoded fields) naming the kind, path, canonical query, user,
// Authorization, render number n and payload length and CRC-32, followed by
// the payload; the render log keeps what each n was rendered for. It is
// safe for concurrent use.
type faultSite struct {
	// hook, if set, runs in the handler after the body is written and
	// before it returns. Set before serving.
	hook func(kind string, n int)
	// midway, if set, runs in the handler when half of a big payload is
	// written. Set before serving.
	midway func(r *http.Request, n int)
	// arrived, if set, runs for every request as the bed receives it,
	// before the middleware (r is the client's request, not the one the
	// handler renders). Set before serving.
	arrived func(r *http.Request)

	mu      sync.Mutex
	renders []faultRender // renders[n-1]

	etags sync.Map // ETag -> faultBody (n 0) it was served with, to check 304s
}

func (s *faultSite) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get(slowHeader) != "" {
		// A render that takes a while, so that a client that gives up
		// early hangs up during it (a cost, not a synchronisation).
		t := time.NewTimer(slowRender)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
		}
	}
	kind, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	rec := faultRender{
		reqID: r.Header.Get("X-Req-Id"), kind: kind, path: r.URL.Path, query: r.URL.Query().Encode(),
		user: "-", auth: "-", at: time.Now().UnixMilli(),
	}
	h, status := w.Header(), http.StatusOK
	switch kind {
	case kindPublic, kindBig:
		h.Set("Cache-Control", "public, max-age=60")
	case kindSWR:
		h.Set("Cache-Control", "max-age=1, stale-while-revalidate=30")
	case kindMissing:
		h.Set("Cache-Control", "max-age=60")
		status = http.StatusNotFound
	case kindVary:
		h.Set("Cache-Control", "max-age=60")
		h.Set("Vary", "X-User")
		rec.user = r.Header.Get("X-User")
	case kindPrivate:
		h.Set("Cache-Control", "private, max-age=60")
		rec.user = r.Header.Get("X-User")
	case kindCookie:
		h.Set("Cache-Control", "max-age=60")
		rec.user = r.Header.Get("X-User")
	case kindAuth:
		h.Set("Cache-Control", "public, max-age=60")
		rec.auth = r.Header.Get("Authorization")
	default:
		http.Error(w, "no such kind", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.renders = append(s.renders, rec)
	n := len(s.renders)
	s.mu.Unlock()

	var payload []byte
	if kind == kindBig {
		payload = bigPayload(rec.path, rec.query, n)
	}
	if kind == kindCookie {
		h.Add("Set-Cookie", fmt.Sprintf("session=%s.%d", rec.user, n))
	}
	h.Set("Content-Type", "text/plain")
	line := url.Values{
		"kind": {kind}, "path": {rec.path}, "query": {rec.query}, "user": {rec.user}, "auth": {rec.auth},
		"n": {strconv.Itoa(n)}, "len": {strconv.Itoa(len(payload))},
		"crc": {strconv.FormatUint(uint64(crc32.ChecksumIEEE(payload)), 16)},
	}.Encode()
	w.WriteHeader(status)
	_, _ = w.Write([]byte(line + "\n"))
	// The payload comes in pieces from a source that stops when the
	// request ends, as a query or a proxied upstream would: a render whose
	// request ended may be cut short.
	const pieces = 8
	for i := range pieces {
		if i == pieces/2 && s.midway != nil {
			s.midway(r, n)
		}
		if r.Context().Err() != nil {
			return
		}
		_, _ = w.Write(payload[i*len(payload)/pieces : (i+1)*len(payload)/pieces])
	}
	if s.hook != nil {
		s.hook(kind, n)
	}
}

func bigPayload(path, query string, n int) []byte {
	unit := []byte(fmt.Sprintf("%s?%s#%d;", path, query, n))
	return bytes.Repeat(unit, bigSize/len(unit)+1)[:bigSize]
}

// render returns render n, if there was one.
func (s *faultSite) render(n int) (faultRender, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n < 1 || n > len(s.renders) {
		return faultRender{}, false
	}
	return s.renders[n-1], true
}

func (s *faultSite) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.renders)
}

// faultBody is a parsed body of the fault site.
type faultBody struct {
	kind, path, query, user, auth string
	n                             int
}

// parseFaultBody parses body and checks that its payload is whole.
func parseFaultBody(body []byte) (faultBody, error) {
	line, payload, ok := bytes.Cut(body, []byte("\n"))
	if !ok {
		return faultBody{}, fmt.Errorf("no header line in a %d-byte body %.60q", len(body), body)
	}
	v, err := url.ParseQuery(string(line))
	if err != nil {
		return faultBody{}, fmt.Errorf("header line %.80q: %v", line, err)
	}
	fb := faultBody{kind: v.Get("kind"), path: v.Get("path"), query: v.Get("query"), user: v.Get("user"), auth: v.Get("auth")}
	fb.n, err = strconv.Atoi(v.Get("n"))
	if err != nil {
		return fb, fmt.Errorf("header line %.80q: n: %v", line, err)
	}
	want, err := strconv.Atoi(v.Get("len"))
	if err != nil || want != len(payload) {
		return fb, fmt.Errorf("render %d: payload is %d bytes, the body says %q", fb.n, len(payload), v.Get("len"))
	}
	if sum := strconv.FormatUint(uint64(crc32.ChecksumIEEE(payload)), 16); sum != v.Get("crc") {
		return fb, fmt.Errorf("render %d: payload CRC %s, the body says %s", fb.n, sum, v.Get("crc"))
	}
	return fb, nil
}

// ---------------------------------------------------------------------------
// Requests and the checks every reply must pass

// faultReq is one request of a fault test.
type faultReq struct {
	id       string
	proc     int
	method   string
	kind     string
	path     string // /kind/i
	rawQuery string // as sent
	query    string // canonical (sorted), as in the key and the body
	user     string // X-User; "" sends none
	auth     string // Authorization; "" sends none
	cookie   bool   // sends a Cookie header
	inm      string // If-None-Match; "" sends none
	slow     bool   // sends slowHeader
}

func (q faultReq) String() string {
	s := fmt.Sprintf("%s %s?%s via %d user=%q", q.method, q.path, q.rawQuery, q.proc, q.user)
	if q.auth != "" {
		s += fmt.Sprintf(" auth=%q", q.auth)
	}
	if q.cookie {
		s += " with cookie"
	}
	if q.inm != "" {
		s += " If-None-Match " + q.inm
	}
	return s
}

// target is the path and canonical query: what the key is built from.
func (q faultReq) target() string {
	if q.query == "" {
		return q.path
	}
	return q.path + "?" + q.query
}

func (q faultReq) headers() []string {
	h := []string{procHeader, strconv.Itoa(q.proc), "X-Req-Id", q.id}
	if q.user != "" {
		h = append(h, "X-User", q.user)
	}
	if q.auth != "" {
		h = append(h, "Authorization", q.auth)
	}
	if q.cookie {
		h = append(h, "Cookie", "sid="+q.user)
	}
	if q.inm != "" {
		h = append(h, "If-None-Match", q.inm)
	}
	if q.slow {
		h = append(h, slowHeader, "1")
	}
	return h
}

// mustBypass reports whether the middleware must neither serve q from the
// cache nor store its response.
func (q faultReq) mustBypass() bool { return q.auth != "" || q.cookie || !storable(q.kind) }

// send sends q to b and checks the reply; start and end bracket it.
func (s *faultSite) send(ctx context.Context, b *testBed, q faultReq) (reply, error) {
	target := q.path
	if q.rawQuery != "" {
		target += "?" + q.rawQuery
	}
	start := time.Now().UnixMilli()
	r, err := b.send(ctx, q.method, target, q.headers()...)
	if err != nil {
		return r, err
	}
	return r, s.check(q, r, start, time.Now().UnixMilli())
}

// check returns what is wrong with r as the reply to q, sent at start and
// received at end (Unix ms), or nil.
func (s *faultSite) check(q faultReq, r reply, start, end int64) error {
	xc := r.cache()
	if r.status == http.StatusNotModified {
		return s.checkNotModified(q, r)
	}
	wantStatus := http.StatusOK
	if q.kind == kindMissing {
		wantStatus = http.StatusNotFound
	}
	switch {
	case r.status != wantStatus:
		return fmt.Errorf("status %d, want %d", r.status, wantStatus)
	case xc != "HIT" && xc != "MISS" && xc != "STALE" && xc != "BYPASS":
		return fmt.Errorf("X-Cache %q", xc)
	case q.mustBypass() && xc != "BYPASS":
		return fmt.Errorf("X-Cache %s: a request with Authorization or Cookie, or a private or cookie-setting response, must bypass the cache", xc)
	case xc == "STALE" && q.kind != kindSWR:
		return fmt.Errorf("X-Cache STALE for a response without a stale window")
	case r.header.Get("Cache-Status") == "":
		return fmt.Errorf("no Cache-Status")
	}
	cookies := r.header.Values("Set-Cookie")
	if (xc == "HIT" || xc == "STALE" || q.kind != kindCookie) && len(cookies) > 0 {
		return fmt.Errorf("X-Cache %s with Set-Cookie %q", xc, cookies)
	}
	if q.method == http.MethodHead {
		if r.body != "" {
			return fmt.Errorf("a HEAD reply with a %d-byte body", len(r.body))
		}
		if q.kind == kindCookie && (len(cookies) != 1 || !strings.HasPrefix(cookies[0], "session="+q.user+".")) {
			return fmt.Errorf("Set-Cookie %q, want one for user %q", cookies, q.user)
		}
		return nil
	}

	fb, err := parseFaultBody([]byte(r.body))
	if err != nil {
		return err
	}
	wantUser, wantAuth := "-", "-"
	if userDependent(q.kind) {
		wantUser = q.user
	}
	if q.kind == kindAuth {
		wantAuth = q.auth
	}
	if fb.kind != q.kind || fb.path != q.path || fb.query != q.query || fb.user != wantUser || fb.auth != wantAuth {
		return fmt.Errorf("body rendered for kind=%s path=%s query=%s user=%q auth=%q (render %d); want kind=%s path=%s query=%s user=%q auth=%q",
			fb.kind, fb.path, fb.query, fb.user, fb.auth, fb.n, q.kind, q.path, q.query, wantUser, wantAuth)
	}
	rn, ok := s.render(fb.n)
	if !ok || rn.kind != fb.kind || rn.path != fb.path || rn.query != fb.query || rn.user != fb.user || rn.auth != fb.auth {
		return fmt.Errorf("render %d in the body is not what the handler rendered as %d: %+v", fb.n, fb.n, rn)
	}
	if (xc == "MISS" || xc == "BYPASS") && rn.reqID != q.id {
		return fmt.Errorf("X-Cache %s with render %d, which was rendered for request %s, not this one (%s)", xc, fb.n, rn.reqID, q.id)
	}
	if q.kind == kindCookie && (len(cookies) != 1 || cookies[0] != fmt.Sprintf("session=%s.%d", q.user, fb.n)) {
		return fmt.Errorf("Set-Cookie %q with render %d for user %q", cookies, fb.n, q.user)
	}
	// Age counts whole seconds since the render began.
	if xc != "BYPASS" {
		age, err := strconv.ParseInt(r.header.Get("Age"), 10, 64)
		lo, hi := (start-rn.at)/1000-1, (end-rn.at)/1000+1
		if err != nil || age < max(lo, 0) || age > hi {
			return fmt.Errorf("X-Cache %s with Age %q for render %d, which began %d to %d ms before", xc, r.header.Get("Age"), fb.n, start-rn.at, end-rn.at)
		}
	}
	if q.inm != "" && q.method == http.MethodGet && xc == "HIT" && r.status == http.StatusOK && r.header.Get("Etag") == q.inm {
		// A stored 2xx that the client's If-None-Match names is a 304.
		return fmt.Errorf("a HIT of the 200 its If-None-Match names with a %d-byte body: want 304", len(r.body))
	}
	if q.kind == kindVary && xc != "BYPASS" && r.header.Get("Vary") != "X-User" {
		return fmt.Errorf("Vary %q", r.header.Values("Vary"))
	}
	if etag := r.header.Get("Etag"); etag != "" {
		fb.n = 0
		s.etags.Store(etag, fb)
	}
	return nil
}

// checkNotModified checks a 304: it may only confirm the response that the
// client's If-None-Match names when that response was rendered for this
// request's path, query and, where the resource depends on it, user.
func (s *faultSite) checkNotModified(q faultReq, r reply) error {
	xc := r.cache()
	etag := r.header.Get("Etag")
	switch {
	case q.inm == "":
		return fmt.Errorf("304 (X-Cache %s) without If-None-Match", xc)
	case xc != "HIT" && xc != "STALE":
		return fmt.Errorf("304 with X-Cache %s", xc)
	case q.mustBypass():
		return fmt.Errorf("304 from the cache for a request that must bypass it")
	case etag != q.inm:
		return fmt.Errorf("304 with ETag %s for If-None-Match %s", etag, q.inm)
	case r.body != "":
		return fmt.Errorf("304 with a %d-byte body", len(r.body))
	}
	v, ok := s.etags.Load(etag)
	if !ok {
		return fmt.Errorf("304 for ETag %s, which no checked reply carried", etag)
	}
	fb := v.(faultBody)
	wantUser := "-"
	if userDependent(q.kind) {
		wantUser = q.user
	}
	if fb.kind != q.kind || fb.path != q.path || fb.query != q.query || fb.user != wantUser {
		return fmt.Errorf("304 confirms ETag %s, which was served for kind=%s path=%s query=%s user=%q; want kind=%s path=%s query=%s user=%q",
			etag, fb.kind, fb.path, fb.query, fb.user, q.kind, q.path, q.query, wantUser)
	}
	return nil
}

// faultQueries are the queries of the random mix: the last two differ only in
// order and share one key.
var faultQueries = []string{"", "a=1", "b=1", "a=1&b=2", "b=2&a=1"}

var faultUsers = []string{"alice", "bob", "carol", ""}

// randomReq returns a random request of the mix.
func randomReq(rng *rand.Rand, id string, procs int) faultReq {
	w := rng.IntN(100)
	kind := faultKinds[len(faultKinds)-1].kind
	for _, k := range faultKinds {
		if w < k.weight {
			kind = k.kind
			break
		}
		w -= k.weight
	}
	q := faultReq{
		id: id, proc: rng.IntN(procs), method: http.MethodGet, kind: kind,
		path:     fmt.Sprintf("/%s/%d", kind, rng.IntN(3)),
		rawQuery: faultQueries[rng.IntN(len(faultQueries))],
		user:     faultUsers[rng.IntN(len(faultUsers))],
	}
	vals, _ := url.ParseQuery(q.rawQuery)
	q.query = vals.Encode()
	if rng.IntN(20) == 0 {
		q.method = http.MethodHead
	}
	if (kind == kindAuth && rng.IntN(3) == 0) || rng.IntN(25) == 0 {
		q.auth = "Bearer token-of-" + q.user
	}
	if rng.IntN(25) == 0 {
		q.cookie = true
	}
	return q
}

// ---------------------------------------------------------------------------
// The bed: instances of one service, each through its own proxy

// faultBed is a testBed whose instances reach the server through their own
// faultproxy, with their own go-redis client and short timeouts.
type faultBed struct {
	*testBed
	proxies []*faultproxy.Proxy
	events  []chan cache.Event // per instance: its cache's server errors (dropped when full)
	verify  *cache.Cache       // straight to the server, to read entries back
}

// newFaultBed starts procs instances of the service in front of site on s,
// in a namespace of their own; everything is stopped at cleanup.
func newFaultBed(tb testing.TB, s *redistest.Server, site *faultSite, procs int) *faultBed {
	tb.Helper()
	b := &faultBed{testBed: &testBed{
		rc: s.Client(tb),
		ns: "mwf" + strings.TrimPrefix(redistest.Key(tb, ""), "test:"),
	}}
	vc, err := cache.New(b.rc, &cache.Options{Namespace: b.ns})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = vc.Close() })
	b.verify = vc

	handlers := make([]http.Handler, procs)
	for i := range procs {
		p, err := faultproxy.Start(s.Addrs()[0])
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = p.Close() }) // after the client and cache below
		b.proxies = append(b.proxies, p)
		rdb := redis.NewClient(&redis.Options{
			Addr:        p.Addr(),
			DialTimeout: 250 * time.Millisecond, ReadTimeout: 250 * time.Millisecond, WriteTimeout: 250 * time.Millisecond,
			PoolTimeout: time.Second, MaxRetries: 1,
		})
		tb.Cleanup(func() { _ = rdb.Close() })
		events := make(chan cache.Event, 64)
		b.events = append(b.events, events)
		c, err := cache.New(rdb, &cache.Options{
			Namespace: b.ns, LockTTL: 500 * time.Millisecond, WaitTimeout: time.Second,
			PollInterval: 50 * time.Millisecond, FailOpenCooldown: 100 * time.Millisecond,
			LoadTimeout: 3 * time.Second, Expiry: cache.ExpiryPolicy{RefreshBackoff: 200 * time.Millisecond},
			Observer: func(e cache.Event) {
				if e.Kind == cache.EventServerError {
					select {
					case events <- e:
					default:
					}
				}
			},
		})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = c.Close() })
		b.caches = append(b.caches, c)
		m, err := middleware.New(c, &middleware.Options{WaitTimeout: time.Second})
		if err != nil {
			tb.Fatal(err)
		}
		handlers[i] = m.Handler(site)
	}
	b.serve(tb, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i, err := strconv.Atoi(r.Header.Get(procHeader))
		if err != nil || i < 0 || i >= procs {
			i = 0
		}
		if site.arrived != nil {
			site.arrived(r)
		}
		handlers[i].ServeHTTP(w, r)
	}), true)
	b.client.Transport.(*http.Transport).MaxIdleConnsPerHost = 64
	return b
}

// resume clears every proxy's faults.
func (b *faultBed) resume() {
	for _, p := range b.proxies {
		p.Resume()
	}
}

// storedResponse mirrors the middleware's stored response, to read
// entries back from the server.
type storedResponse struct {
	Status     int
	Header     http.Header
	Body       []byte
	Stored     int64
	FreshUntil int64
	Vary       []string
	VaryValues []string
}

// entry reads target's entry straight from the server; ok is false when
// there is none (or a rebuild claim holds its place).
func (b *faultBed) entry(tb testing.TB, target string, vary ...string) (resp storedResponse, ok bool) {
	tb.Helper()
	resp, err := cache.Get[storedResponse](context.Background(), b.verify, b.userKey(target, vary...))
	switch {
	case err == nil, errors.Is(err, cache.ErrStale):
		return resp, true
	case errors.Is(err, cache.ErrMiss):
		return resp, false
	}
	tb.Fatalf("reading the entry for %s: %v", target, err)
	return resp, false
}

// ---------------------------------------------------------------------------
// The random mix under a fault schedule

// faultSeed returns the seed of a test's random mix: MWFAULT_SEED if set.
func faultSeed(tb testing.TB) uint64 {
	tb.Helper()
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("MWFAULT_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			tb.Fatalf("MWFAULT_SEED: %v", err)
		}
	}
	tb.Logf("seed %d (MWFAULT_SEED=%d repeats the mix; the schedule's timing still varies)", seed, seed)
	return seed
}

// faultTally is what one client goroutine saw.
type faultTally struct {
	byCache      map[string]int // X-Cache value -> replies
	byStatus     map[int]int    // status -> replies
	requests     int
	aborted      int // requests the client gave up on (by design)
	abortedIDs   map[string]bool
	errors       int // requests that failed otherwise
	hitsInFaults int // HIT replies received while faults were on
	violations   []string
	seen         map[faultReq]bool // resources asked for, as plain GETs for the read-back
}

// TestMiddleware_faults_randomMix: clients send a random mix of requests
// (public, per-user Vary, private, cookie-setting, Authorization-bearing,
// big, stale-while-revalidate and 404 resources, with and without
// credentials) to two instances while the proxies in front of the server
// add latency and spikes, reset and drop connections, black-hole traffic
// and resume, and the server is killed and restarted. Every reply must be
// the one rendered for its request's path and query and, where the
// resource depends on the user, its user; nothing private, cookie-setting
// or credentialed is ever served from the cache; X-Cache and Age agree
// with the render log. After the faults, every entry on the server is read
// back (straight and through both instances) and must be whole and stored
// under the key of the request it was rendered for.
func TestMiddleware_faults_randomMix(t *testing.T) {
	s := redistest.Start(t, redistest.Redis8) // its own: the schedule kills it
	seed := faultSeed(t)
	const procs, clients = 2, 12
	site := &faultSite{}
	b := newFaultBed(t, s, site, procs)

	var inFaults atomic.Bool
	stop := make(chan struct{})
	tallies := make(chan faultTally, clients)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tallies <- runFaultClient(t.Context(), b, site, rand.New(rand.NewPCG(seed, uint64(c))), c, procs, stop, &inFaults)
		}()
	}
	stopClients := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopClients()

	p0, p1 := b.proxies[0], b.proxies[1]
	both := func(f func(p *faultproxy.Proxy)) func() error {
		return func() error { f(p0); f(p1); return nil }
	}
	resume := func() error { b.resume(); return nil }
	type step struct {
		name string
		do   func() error
		hold time.Duration
	}
	steps := []step{
		{"warm up", nil, 500 * time.Millisecond},
		{"faults on", func() error { inFaults.Store(true); return nil }, 0},
		{"latency and spikes", both(func(p *faultproxy.Proxy) {
			p.SetLatency(2 * time.Millisecond)
			p.SetSpikes(0.05, 400*time.Millisecond) // beyond the 250ms read timeout
		}), 1200 * time.Millisecond},
		{"resume", resume, 300 * time.Millisecond},
		// Early, so that the entries checked at the end were written
		// under the faults that follow (a restarted server is empty).
		{"kill the server", func() error { s.Kill(); return nil }, 500 * time.Millisecond},
		{"restart the server", s.Restart, 400 * time.Millisecond},
	}
	for i := range 6 {
		p := b.proxies[i%2]
		steps = append(steps, step{"reset", func() error { p.Reset(); return nil }, 150 * time.Millisecond})
	}
	for i := range 6 {
		p := b.proxies[i%2]
		steps = append(steps, step{"drop", func() error { p.Drop(); return nil }, 150 * time.Millisecond})
	}
	steps = append(steps,
		step{"black hole instance 0", func() error { p0.BlackHole(); return nil }, 700 * time.Millisecond},
		step{"resume", resume, 300 * time.Millisecond},
		step{"black hole both", both((*faultproxy.Proxy).BlackHole), 700 * time.Millisecond},
		step{"reset what the black hole held", both(func(p *faultproxy.Proxy) { p.Reset() }), 0},
		step{"resume", resume, 300 * time.Millisecond},
		step{"spikes on instance 1", func() error { p1.SetSpikes(0.2, 300*time.Millisecond); return nil }, 500 * time.Millisecond},
		step{"resume", resume, 0},
		step{"faults off", func() error { inFaults.Store(false); return nil }, 0},
	)
	began := time.Now()
	for _, st := range steps {
		if st.do != nil {
			if err := st.do(); err != nil {
				stopClients()
				t.Fatalf("%s: %v", st.name, err)
			}
		}
		if st.hold > 0 {
			timer := time.NewTimer(st.hold) // the schedule, not synchronisation
			<-timer.C
		}
	}
	t.Logf("fault schedule ran for %v", time.Since(began).Round(time.Millisecond))
	stopClients()
	close(tallies)

	total := faultTally{byCache: map[string]int{}, byStatus: map[int]int{}, seen: map[faultReq]bool{}, abortedIDs: map[string]bool{}}
	for tl := range tallies {
		for k, v := range tl.byCache {
			total.byCache[k] += v
		}
		for k, v := range tl.byStatus {
			total.byStatus[k] += v
		}
		total.requests += tl.requests
		total.aborted += tl.aborted
		maps.Copy(total.abortedIDs, tl.abortedIDs)
		total.errors += tl.errors
		total.hitsInFaults += tl.hitsInFaults
		total.violations = append(total.violations, tl.violations...)
		for q := range tl.seen {
			total.seen[q] = true
		}
	}
	for i, p := range b.proxies {
		st := p.Stats()
		t.Logf("proxy %d: %+v", i, st)
	}
	for i, c := range b.caches {
		t.Logf("instance %d: %+v", i, c.Stats())
	}
	t.Logf("%d requests: X-Cache %v, status %v, %d HITs while faults were on, %d renders, %d aborted by the client, %d errors",
		total.requests, total.byCache, total.byStatus, total.hitsInFaults, site.count(), total.aborted, total.errors)
	for i, v := range total.violations {
		if i == 20 {
			t.Errorf("... and %d more", len(total.violations)-20)
			break
		}
		t.Error(v)
	}
	if total.errors > 0 {
		t.Errorf("%d requests failed: the middleware must answer every request whatever the server does", total.errors)
	}
	// Clients that hang up (before, during or after the render they
	// started or wait for) are part of the mix: their renders go on and
	// may be stored, and the read-back checks what they left.
	orphans := 0
	for n := 1; n <= site.count(); n++ {
		if rn, _ := site.render(n); total.abortedIDs[rn.reqID] {
			orphans++
		}
	}
	t.Logf("%d renders for requests whose client gave up", orphans)
	if total.aborted == 0 || orphans == 0 {
		t.Errorf("%d requests given up on, %d of them rendered: want clients hanging up during their renders", total.aborted, orphans)
	}
	var resets, drops, spikes int
	for _, p := range b.proxies {
		st := p.Stats()
		resets, drops, spikes = resets+st.Reset, drops+st.Dropped, spikes+st.Spikes
	}
	if resets == 0 || drops == 0 || spikes == 0 {
		t.Errorf("the faults did not happen: %d connections reset, %d dropped, %d chunks delayed by a spike", resets, drops, spikes)
	}
	for i, c := range b.caches {
		if st := c.Stats(); st.ServerErrors == 0 || st.FailOpenLoads == 0 {
			t.Errorf("the faults did not reach instance %d: %d server errors, %d loads without the server", i, st.ServerErrors, st.FailOpenLoads)
		}
	}
	if total.hitsInFaults == 0 || total.byCache["MISS"] == 0 || total.byCache["BYPASS"] == 0 || total.byStatus[http.StatusNotModified] == 0 {
		t.Errorf("X-Cache %v, status %v, %d HITs under faults: want HITs under faults, MISSes, BYPASSes and 304s",
			total.byCache, total.byStatus, total.hitsInFaults)
	}
	if t.Failed() {
		return
	}
	b.readBack(t, site, total.seen)
}

// runFaultClient sends random requests to b until stop is closed.
func runFaultClient(ctx context.Context, b *faultBed, site *faultSite, rng *rand.Rand, c, procs int, stop <-chan struct{}, inFaults *atomic.Bool) faultTally {
	tl := faultTally{byCache: map[string]int{}, byStatus: map[int]int{}, seen: map[faultReq]bool{}, abortedIDs: map[string]bool{}}
	var etags []string             // served to this client
	last := map[[2]string]string{} // target, user -> the last ETag served
	var again faultReq             // the last GET answered with an ETag (its inm set to it)
	for i := 0; ; i++ {
		select {
		case <-stop:
			return tl
		default:
		}
		id := fmt.Sprintf("c%d-%d", c, i)
		q := randomReq(rng, id, procs)
		if rng.IntN(6) == 0 {
			// The ETag this client was last served for this resource and
			// user, or any it was served: only the right one may get a 304.
			// Half of these go back to the response the client was last
			// served, as a browser does: a random resource of the mix is
			// rarely one the client holds an ETag for (a few hundred
			// pairs of target and user per client), so without them the
			// run's 304s, one or two, came down to how many requests the
			// schedule's time let through, and some runs had none.
			if again.inm != "" && rng.IntN(2) == 0 {
				q = again
				q.id, q.proc, q.slow = id, rng.IntN(procs), false
			} else if e, ok := last[[2]string{q.target(), q.user}]; ok && rng.IntN(2) == 0 {
				q.inm = e
			} else if len(etags) > 0 {
				q.inm = etags[rng.IntN(len(etags))]
			}
		}
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		abort := rng.IntN(30) == 0 // a client that gives up early
		if abort {
			// Most likely during its render, if it has one: the render
			// goes on for the others and may be stored.
			q.slow = true
			cancel()
			rctx, cancel = context.WithTimeout(ctx, time.Duration(1+rng.IntN(40))*time.Millisecond)
		}
		// Every resource asked for, whatever the outcome (an abandoned
		// render may still be stored), in the form the read-back sends.
		k := faultReq{method: http.MethodGet, kind: q.kind, path: q.path, rawQuery: q.query, query: q.query}
		if userDependent(q.kind) {
			k.user = q.user
		}
		tl.seen[k] = true

		r, err := site.send(rctx, b.testBed, q)
		cancel()
		tl.requests++
		if r.status == 0 { // no reply
			if abort && errors.Is(err, context.DeadlineExceeded) {
				tl.aborted++
				tl.abortedIDs[q.id] = true
			} else {
				tl.errors++
				if len(tl.violations) < 5 {
					tl.violations = append(tl.violations, fmt.Sprintf("%v: %v", q, err))
				}
			}
			continue
		}
		tl.byCache[r.cache()]++
		tl.byStatus[r.status]++
		// ETags of checked GET replies (a HEAD's says nothing of its body).
		if etag := r.header.Get("Etag"); etag != "" && err == nil && q.method == http.MethodGet && r.status != http.StatusNotModified {
			last[[2]string{q.target(), q.user}] = etag
			again = q
			again.inm = etag
			if len(etags) < 64 {
				etags = append(etags, etag)
			} else {
				etags[rng.IntN(len(etags))] = etag
			}
		}
		if r.cache() == "HIT" && inFaults.Load() {
			tl.hitsInFaults++
		}
		if err != nil && len(tl.violations) < 20 {
			tl.violations = append(tl.violations, fmt.Sprintf("%v: %v", q, err))
		}
	}
}

// readBack checks what the faults left on the server: every entry must be
// whole and hold a response rendered for its key, nothing private may be
// stored, and every resource requested during the run must come back
// correct through both instances, and from the cache once stored.
func (b *faultBed) readBack(tb testing.TB, site *faultSite, seen map[faultReq]bool) {
	tb.Helper()
	ctx := testContext(tb, 20*time.Second)

	// Wait until each instance stores again (its fail-open cool-down is
	// over): a canary only it requests must come back as a HIT.
	for i := range b.proxies {
		canary := faultReq{method: http.MethodGet, kind: kindPublic, path: fmt.Sprintf("/%s/canary%d", kindPublic, i)}
		b.waitHit(tb, ctx, site, canary, i)
	}

	// Every entry on the server.
	for i := range b.proxies { // the canaries
		seen[faultReq{method: http.MethodGet, kind: kindPublic, path: fmt.Sprintf("/%s/canary%d", kindPublic, i)}] = true
	}
	reqs := slices.Collect(maps.Keys(seen))
	slices.SortFunc(reqs, func(a, b faultReq) int { return strings.Compare(a.String(), b.String()) })
	type known struct {
		q    faultReq
		user *string // the X-User of a variant key
	}
	keys := map[string]known{}
	for _, q := range reqs {
		keys[b.valueKey(q.target())] = known{q: q}
		for _, u := range faultUsers {
			keys[b.valueKey(q.target(), "\nvary X-User: "+u)] = known{q: q, user: &u}
		}
	}
	var entries, claims, earlier int
	iter := b.rc.Scan(ctx, 0, b.ns+":*", 100).Iterator()
	for iter.Next(ctx) {
		key := iter.Val()
		if strings.HasSuffix(key, ":lock") || strings.HasSuffix(key, ":fail") {
			continue // a rebuild lock; a failed render's marker (every uncacheable render is one)
		}
		k, ok := keys[key]
		if !ok {
			// A variant of an earlier generation (its marker was
			// replaced or deleted: it is out of reach and expires
			// unread): it must still be its own user's page.
			if err := b.checkEarlier(ctx, key, reqs); err != nil {
				tb.Errorf("the server holds %q, which no request of the run maps to: %v", key, err)
			}
			earlier++
			continue
		}
		var vary []string
		if k.user != nil {
			vary = []string{"\nvary X-User: " + *k.user}
		}
		resp, ok := b.entry(tb, k.q.target(), vary...)
		if !ok {
			claims++
			continue
		}
		entries++
		if err := checkStored(k.q, k.user, resp); err != nil {
			tb.Errorf("entry for %s (variant %v): %v", k.q.target(), vary, err)
		}
	}
	if err := iter.Err(); err != nil {
		tb.Fatal(err)
	}
	tb.Logf("%d entries on the server checked (%d rebuild claims, %d variants of earlier generations), %d distinct resources requested", entries, claims, earlier, len(reqs))
	if entries == 0 {
		tb.Error("no entries on the server to check")
	}

	// Through the middleware: each resource through instance 0, 1, 0, 1.
	// By the last pass both instances know every Vary and every storable
	// resource is stored.
	for pass := range 4 {
		counts := map[string]int{}
		for i, q := range reqs {
			q.proc, q.id = pass%2, fmt.Sprintf("readback%d-%d", pass, i)
			r, err := site.send(ctx, b.testBed, q)
			if r.status == 0 {
				tb.Fatalf("pass %d: %v: %v", pass, q, err)
			}
			if err != nil {
				tb.Errorf("pass %d: %v: %v", pass, q, err)
			}
			counts[r.cache()]++
			if pass == 3 && storable(q.kind) && r.cache() != "HIT" && r.cache() != "STALE" {
				tb.Errorf("pass %d: %v: X-Cache %s, want it from the cache now", pass, q, r.cache())
			}
		}
		tb.Logf("read-back pass %d through instance %d: X-Cache %v", pass, pass%2, counts)
	}
}

// checkEarlier checks the entry under key, which no current key maps to:
// a variant of an earlier generation of a Vary response, rendered for
// the user it says, for one of reqs.
func (b *faultBed) checkEarlier(ctx context.Context, key string, reqs []faultReq) error {
	raw, err := b.rc.Get(ctx, key).Bytes()
	if err != nil {
		return err
	}
	e, err := codec.Decode(raw)
	if err != nil {
		return err
	}
	var resp storedResponse
	if err := cache.Msgpack.Unmarshal(e.Payload, &resp); err != nil {
		return err
	}
	fb, err := parseFaultBody(resp.Body)
	if err != nil {
		return err
	}
	for _, q := range reqs {
		if q.kind == kindVary && fb.kind == q.kind && fb.path == q.path && fb.query == q.query {
			return checkStored(q, &fb.user, resp)
		}
	}
	return fmt.Errorf("render %d for kind=%s path=%s query=%s", fb.n, fb.kind, fb.path, fb.query)
}

// checkStored returns what is wrong with resp stored under the key of q
// (the variant for user, if set), or nil.
func checkStored(q faultReq, user *string, resp storedResponse) error {
	if !storable(q.kind) {
		return fmt.Errorf("a %s response is stored", q.kind)
	}
	if len(resp.Header.Values("Set-Cookie")) > 0 {
		return fmt.Errorf("stored with Set-Cookie %q", resp.Header.Values("Set-Cookie"))
	}
	if q.kind == kindVary && user == nil && resp.VaryValues == nil {
		// The marker the first render of a Vary response leaves under
		// the plain key: its Vary names and nothing that could be served.
		if !slices.Equal(resp.Vary, []string{"X-User"}) || resp.Status != 0 || len(resp.Header) != 0 || len(resp.Body) != 0 {
			return fmt.Errorf("marker with Vary %q, status %d, header %q, body %q", resp.Vary, resp.Status, resp.Header, resp.Body)
		}
		return nil
	}
	fb, err := parseFaultBody(resp.Body)
	if err != nil {
		return err
	}
	wantUser, wantAuth := "-", "-"
	if q.kind == kindAuth {
		wantAuth = "" // requests with Authorization are never stored
	}
	if fb.kind != q.kind || fb.path != q.path || fb.query != q.query || fb.auth != wantAuth {
		return fmt.Errorf("holds render %d for kind=%s path=%s query=%s auth=%q", fb.n, fb.kind, fb.path, fb.query, fb.auth)
	}
	if q.kind != kindVary {
		if fb.user != wantUser || len(resp.Vary) != 0 || user != nil {
			return fmt.Errorf("holds render %d for user %q, Vary %q, under variant %v", fb.n, fb.user, resp.Vary, user)
		}
		return nil
	}
	// A Vary response is stored under its user's variant key, or, when
	// storing it there failed, under the plain key (the first render,
	// before the Vary is known), and in both says which user it was
	// rendered for.
	if !slices.Equal(resp.Vary, []string{"X-User"}) || !slices.Equal(resp.VaryValues, []string{fb.user}) {
		return fmt.Errorf("render %d for user %q stored with Vary %q = %q", fb.n, fb.user, resp.Vary, resp.VaryValues)
	}
	if user != nil && *user != fb.user {
		return fmt.Errorf("render %d for user %q stored under user %q's variant", fb.n, fb.user, *user)
	}
	return nil
}

// ---------------------------------------------------------------------------
// A big response hit by a fault while it is being stored

// TestMiddleware_faults_bigStore: the connection carrying a 256 KiB
// response to the server is black-holed, cut part way, or the server is
// killed, exactly while the response is being stored (the fault is set off
// by the handler itself, after it has written the body). The client of
// that render still gets it whole; the server then holds nothing or the
// whole response; and the next requests, through both instances, get a
// whole, correct body and, once it is stored again, a HIT.
func TestMiddleware_faults_bigStore(t *testing.T) {
	s := redistest.Start(t, redistest.Redis8)
	tests := []struct {
		name   string
		during func(b *faultBed)               // in the render, after the body is written
		after  func(b *faultBed) error         // once the store has failed
		check  func(t *testing.T, b *faultBed) // before after
	}{
		{
			name:   "black hole, then reset",
			during: func(b *faultBed) { b.proxies[0].BlackHole() },
			after:  func(b *faultBed) error { b.proxies[0].Reset(); b.resume(); return nil },
		},
		{
			// The held command reaches the server late, if at all.
			name:   "black hole, then resume",
			during: func(b *faultBed) { b.proxies[0].BlackHole() },
			after:  func(b *faultBed) error { b.resume(); return nil },
		},
		{
			// Each 16 KiB chunk of the command is held back 3s with
			// probability 1/2 (and those behind it with it): the server
			// gets a part of the command (or, one time in two, none),
			// then the connection is reset.
			name:   "cut part way",
			during: func(b *faultBed) { b.proxies[0].SetSpikes(0.5, 3*time.Second) },
			after:  func(b *faultBed) error { b.proxies[0].Reset(); b.resume(); return nil },
			check: func(t *testing.T, b *faultBed) {
				if st := b.proxies[0].Stats(); st.Spikes == 0 {
					t.Errorf("no chunk was held back: %+v", st)
				}
				t.Logf("the server holds %d bytes of unfinished commands", pendingInput(t, b.rc))
			},
		},
		{
			name:   "server killed",
			during: func(*faultBed) { s.Kill() },
			after:  func(*faultBed) error { return s.Restart() },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testContext(t, 20*time.Second)
			site := &faultSite{}
			var (
				bed   atomic.Pointer[faultBed] // set once the bed serves
				fired atomic.Bool
			)
			const path = "/big/0"
			site.hook = func(kind string, n int) {
				rn, _ := site.render(n)
				if rn.path == path && !fired.Swap(true) {
					tt.during(bed.Load())
				}
			}
			b := newFaultBed(t, s, site, 2)
			bed.Store(b)

			// First store another big response through instance 0, so
			// that what the fault hits is the write of the response, not
			// the probe of the server's commands that precedes the first.
			warm := faultReq{method: http.MethodGet, kind: kindBig, path: "/big/warm"}
			b.waitHit(t, ctx, site, warm, 0)

			q := faultReq{id: "first", proc: 0, method: http.MethodGet, kind: kindBig, path: path, rawQuery: "x=1", query: "x=1"}
			r, err := site.send(ctx, b.testBed, q)
			if r.status == 0 {
				t.Fatalf("%v: %v", q, err)
			}
			if err != nil || r.cache() != "MISS" || len(r.body) < bigSize {
				t.Fatalf("the rendering client got X-Cache %s, %d bytes: %v; want a whole MISS", r.cache(), len(r.body), err)
			}
			e := redistest.Recv(t, ctx, b.events[0], "the store to fail")
			t.Logf("the store failed: %v", e.Err)
			if !fired.Load() {
				t.Fatal("the fault was not set off")
			}
			if tt.check != nil {
				tt.check(t, b)
			}
			if err := tt.after(b); err != nil {
				t.Fatal(err)
			}
			if resp, ok := b.entry(t, q.target()); ok {
				if err := checkStored(q, nil, resp); err != nil {
					t.Errorf("after the fault the server holds a bad entry: %v", err)
				}
				t.Logf("after the fault the server holds %d bytes of body", len(resp.Body))
			}

			// Until it is stored again, every reply is whole; then a HIT.
			// (The first instance waits out its fail-open cool-down, and
			// both a rebuild claim left behind by the failed store.)
			xcaches := b.waitHit(t, ctx, site, q, 1, 0)
			t.Logf("replies after the fault: %v; %d renders", xcaches, site.count())
			resp, ok := b.entry(t, q.target())
			if !ok {
				t.Fatal("a HIT, but nothing on the server")
			}
			if err := checkStored(q, nil, resp); err != nil {
				t.Errorf("the stored entry: %v", err)
			}
		})
	}
}

// waitHit sends q through the instances procs in turn, checking every
// reply, until one is a HIT; it returns the X-Cache values seen.
func (b *faultBed) waitHit(tb testing.TB, ctx context.Context, site *faultSite, q faultReq, procs ...int) []string {
	tb.Helper()
	var xcaches []string
	redistest.WaitFor(tb, ctx, "a HIT for "+q.target(), func() bool {
		q.proc = procs[len(xcaches)%len(procs)]
		q.id = fmt.Sprintf("%s-%d", q.target(), len(xcaches))
		r, err := site.send(ctx, b.testBed, q)
		if err != nil {
			tb.Fatalf("%v: %v", q, err)
		}
		xcaches = append(xcaches, r.cache())
		return r.cache() == "HIT"
	})
	return xcaches
}

// pendingInput returns how many bytes of commands not yet complete the
// server holds for its clients (CLIENT LIST qbuf and argv-mem).
func pendingInput(tb testing.TB, rc redis.UniversalClient) int {
	tb.Helper()
	list, err := rc.ClientList(context.Background()).Result()
	if err != nil {
		tb.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(list, "\n") {
		if strings.Contains(line, "cmd=client|list") {
			continue
		}
		for _, f := range strings.Fields(line) {
			name, v, _ := strings.Cut(f, "=")
			if name == "qbuf" || name == "argv-mem" {
				k, _ := strconv.Atoi(v)
				n += k
			}
		}
	}
	return n
}

// TestMiddleware_faults_clientGone: the client of a big render hangs up
// when half the body is written, while requests in both instances wait
// for that render. The handler's source ends with its request, as a
// query's would; but the request the handler renders for the cache is no
// longer the client's, so the render goes on, whole, is stored, and
// answers the waiters and every later request: one render in all.
func TestMiddleware_faults_clientGone(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testContext(t, 20*time.Second)
	site := &faultSite{}
	half, gone := make(chan struct{}), make(chan struct{})
	var fired atomic.Bool
	site.midway = func(r *http.Request, n int) {
		if !fired.Swap(true) {
			close(half)
			block(ctx, gone) // the server has seen the client go
		}
	}
	site.arrived = func(r *http.Request) {
		if r.Header.Get("X-Req-Id") == "gone" {
			context.AfterFunc(r.Context(), func() { close(gone) })
		}
	}
	b := newFaultBed(t, s, site, 2)
	q := faultReq{id: "gone", proc: 0, method: http.MethodGet, kind: kindBig, path: "/big/gone"}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sent := b.goSend(cctx, q.method, q.path, q.headers()...)
	redistest.Recv(t, ctx, half, "half the body")
	type waited struct {
		r   reply
		err error
	}
	var waiters []chan waited
	for i := range 4 {
		w := q
		w.id, w.proc = fmt.Sprintf("waiter%d", i), i%2
		ch := make(chan waited, 1)
		waiters = append(waiters, ch)
		go func() {
			r, err := site.send(ctx, b.testBed, w)
			ch <- waited{r, err}
		}()
	}
	redistest.WaitFor(t, ctx, "the waiters", func() bool {
		st := b.stats()
		return st.Misses == 5 && st.Waits >= 1
	})
	cancel()
	redistest.Recv(t, ctx, gone, "the server to see the client go")
	if r := redistest.Recv(t, ctx, sent, "the abandoned request"); r.err == nil {
		t.Fatalf("the abandoned request got %v", r.reply)
	}
	for _, ch := range waiters {
		w := redistest.Recv(t, ctx, ch, "a waiter")
		if w.err != nil {
			t.Errorf("waiter: %v", w.err)
			continue
		}
		fb, err := parseFaultBody([]byte(w.r.body))
		if err != nil || fb.n != 1 || w.r.cache() == "BYPASS" {
			t.Errorf("waiter: X-Cache %s, render %d (%v); want the abandoned render, whole, from the cache", w.r.cache(), fb.n, err)
		}
	}
	xcaches := b.waitHit(t, ctx, site, q, 1, 0)
	if n := site.count(); n != 1 || len(xcaches) != 1 {
		t.Errorf("replies after the client hung up: %v; %d renders, want a HIT at once and 1 render", xcaches, n)
	}
	resp, ok := b.entry(t, q.target())
	if !ok {
		t.Fatal("a HIT, but nothing on the server")
	}
	if err := checkStored(q, nil, resp); err != nil {
		t.Errorf("the stored entry: %v", err)
	}
}
