package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/middleware"
	"github.com/redis/go-redis/v9"
)

// HTTP traffic: every worker serves pages on a loopback port through the
// middleware, over a Cache of its own (through the worker's faulty cache
// client) in a namespace that all workers share, so that pages rendered by
// one worker are served by the others. Its clients send every request with
// the same Host, as a load balancer in front of pods would, so the keys are
// the same in every worker.
//
// Pages (all 200 unless the database read fails):
//
//	/p/{n}?a=..&b=..  public, max-age=1 (odd n: also stale-while-revalidate=1);
//	                  names the path and sorted query, and no user
//	/u/{n}            public, max-age=1, Vary: X-User; names the X-User
//	/me               private; names the X-User
//	/c/{n}            public, max-age=1, but Set-Cookie; names the X-User
//
// Every body also names the worker that rendered it and the version of a
// database key it read over the direct client. One request in 20 for a
// public page carries a Cookie, which must bypass the cache. A wrong
// response is one for another page or user, one that is not a 200 (5xx
// count as errors instead), a private, Set-Cookie or Cookie exchange
// answered from the cache (X-Cache HIT or STALE), or a Set-Cookie page
// without its cookie. With sabotage, /u/0, /u/4, ... (one in 4) leave out
// Vary: X-User.

// httpHost is the Host of every request: the same in all workers.
const httpHost = "soak.test"

// httpPages is how many pages of each numbered kind there are.
const httpPages = 20

// httpUsers is how many users there are: X-User is "user0" to "user3".
const httpUsers = 4

func httpNamespace(prefix string) string { return prefix + ":http" }

// web is a worker's HTTP server, its middleware and its clients.
type web struct {
	w      *worker
	c      *cache.Cache // the middleware's, through the faulty cache client
	srv    *http.Server
	served chan struct{} // closed when Serve has returned
	tr     *http.Transport
	client *http.Client
	base   string // "http://127.0.0.1:port"

	requests, renders, wrong, elsewhere atomic.Int64

	mu      sync.Mutex // guards the fields below
	xcache  map[string]int64
	conns   map[net.Conn]bool // the server's open connections
	changed chan struct{}     // signalled when a connection closes; capacity 1
}

// openWeb starts the HTTP server on a loopback port.
func (w *worker) openWeb() (*web, error) {
	c, err := cache.New(w.cacheC, &cache.Options{
		Namespace: httpNamespace(w.cfg.Prefix),
		Near:      w.near(),
		Logger:    w.logger,
		Expiry: cache.ExpiryPolicy{
			Fresh:          time.Second, // the responses' max-age decides, through cache.Expire
			RefreshBackoff: 200 * time.Millisecond,
		},
		LockTTL:          time.Second,
		LoadTimeout:      2 * time.Second,
		WaitTimeout:      time.Second,
		PollInterval:     100 * time.Millisecond,
		FailOpenCooldown: failOpenCooldown,
	})
	if err != nil {
		return nil, err
	}
	mw, err := middleware.New(c, &middleware.Options{Freshness: middleware.FreshnessPolicy{Fresh: time.Second}, WaitTimeout: time.Second})
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	s := &web{w: w, c: c, served: make(chan struct{}), base: "http://" + ln.Addr().String(),
		xcache: map[string]int64{}, conns: map[net.Conn]bool{}, changed: make(chan struct{}, 1)}
	s.srv = &http.Server{
		Handler:           mw.Handler(http.HandlerFunc(s.page)),
		ReadHeaderTimeout: 10 * time.Second,
		ConnState:         s.connState,
	}
	s.tr = &http.Transport{MaxIdleConnsPerHost: max(2, w.cfg.HTTP), IdleConnTimeout: time.Minute}
	s.client = &http.Client{Transport: s.tr}
	go func() {
		defer close(s.served)
		_ = s.srv.Serve(ln) // http.ErrServerClosed after close
	}()
	return s, nil
}

// connState tracks the server's connections, so that idle can close them
// and wait for them to be gone.
func (s *web) connState(c net.Conn, st http.ConnState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch st {
	case http.StateNew:
		s.conns[c] = true
	case http.StateClosed, http.StateHijacked:
		delete(s.conns, c)
		select {
		case s.changed <- struct{}{}:
		default:
		}
	}
}

// idle closes every connection, client and server side, once the clients
// have stopped, and waits (up to 5 s) until the server has seen them all
// closed. Quiet snapshots then hold only the server's accept loop: HTTP
// keep-alive connections (two goroutines in the client, one in the server,
// each) would otherwise count how many connections happened to be open,
// which is the harness, not the library; a handler stuck in the middleware
// still counts, because closing its connection does not end it.
func (s *web) idle() {
	s.tr.CloseIdleConnections()
	s.mu.Lock()
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	for {
		s.mu.Lock()
		n := len(s.conns)
		s.mu.Unlock()
		if n == 0 {
			return
		}
		select {
		case <-s.changed:
		case <-t.C:
			return
		}
	}
}

// close stops the server and waits for its accept loop, then closes the
// client's connections and the cache.
func (s *web) close() {
	_ = s.srv.Close()
	<-s.served
	s.tr.CloseIdleConnections()
	_ = s.c.Close()
}

// page renders the pages described at the top of this file; every reply
// is checked by the client that asked for it (httpRequest.check).
func (s *web) page(rw http.ResponseWriter, r *http.Request) {
	s.renders.Add(1)
	kind, n, ok := parsePath(r.URL.Path)
	if !ok {
		http.NotFound(rw, r)
		return
	}
	ver, err := s.w.direct.Get(r.Context(), dbKey(s.w.cfg.Prefix, n%s.w.cfg.Keys)).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		http.Error(rw, "database: "+err.Error(), http.StatusInternalServerError)
		return
	}
	h := rw.Header()
	user := r.Header.Get("X-User")
	switch kind {
	case "p":
		user = "" // public pages name no user
		cc := "public, max-age=1"
		if n%2 == 1 {
			cc += ", stale-while-revalidate=1"
		}
		h.Set("Cache-Control", cc)
	case "u":
		h.Set("Cache-Control", "public, max-age=1")
		// Sabotage: one page in 4 names the user without saying Vary, so
		// the middleware serves one user's page to the others. (One in 20
		// was too few for a 4 s run: about 11 requests, and a run could
		// see none answered from another user's render.)
		if !s.w.cfg.Sabotage || n%4 != 0 {
			h.Set("Vary", "X-User")
		}
	case "me":
		h.Set("Cache-Control", "private")
	case "c":
		h.Set("Cache-Control", "public, max-age=1")
		h.Add("Set-Cookie", (&http.Cookie{Name: "seen", Value: user + "-" + strconv.Itoa(n)}).String())
	}
	h.Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = fmt.Fprintf(rw, "page=%s user=%s by=%s version=%d\n", canonicalPage(r.URL.Path, r.URL.Query()), user, s.w.name(), ver)
}

// parsePath splits "/p/3" into ("p", 3); "/me" is ("me", 0).
func parsePath(p string) (kind string, n int, ok bool) {
	if p == "/me" {
		return "me", 0, true
	}
	kind, num, ok := strings.Cut(strings.TrimPrefix(p, "/"), "/")
	if !ok || (kind != "p" && kind != "u" && kind != "c") {
		return "", 0, false
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 0 || n >= httpPages {
		return "", 0, false
	}
	return kind, n, true
}

// canonicalPage is a path with its query sorted (Encode sorts by name),
// as it appears in a body.
func canonicalPage(path string, q url.Values) string {
	if len(q) == 0 {
		return path
	}
	return path + "?" + q.Encode()
}

// httpRequest is one request a client makes and what its reply must be.
type httpRequest struct {
	path, rawQuery string
	page           string // canonicalPage of path and query: what the body must name
	user           string // X-User
	cookie         bool   // sends a Cookie: must bypass the cache
	perUser        bool   // the body must name user
	neverCached    bool   // private or Set-Cookie: never HIT or STALE
	setsCookie     bool   // the reply must carry the page's Set-Cookie
}

// randomRequest picks a page, a user and a query.
func randomRequest(r *rand.Rand) httpRequest {
	n := r.IntN(httpPages)
	q := httpRequest{user: "user" + strconv.Itoa(r.IntN(httpUsers))}
	switch x := r.IntN(20); {
	case x < 10:
		q.path = "/p/" + strconv.Itoa(n)
		// A small query space, sent in either order: the key sorts it.
		var parts []string
		if r.IntN(2) == 0 {
			parts = append(parts, "a="+strconv.Itoa(r.IntN(3)))
		}
		if r.IntN(2) == 0 {
			parts = append(parts, "b=x"+strconv.Itoa(r.IntN(2)))
		}
		if len(parts) == 2 && r.IntN(2) == 0 {
			parts[0], parts[1] = parts[1], parts[0]
		}
		q.rawQuery = strings.Join(parts, "&")
		q.cookie = r.IntN(20) == 0
	case x < 16:
		q.path, q.perUser = "/u/"+strconv.Itoa(n), true
	case x < 18:
		q.path, q.perUser, q.neverCached = "/me", true, true
	default:
		q.path, q.perUser, q.neverCached, q.setsCookie = "/c/"+strconv.Itoa(n), true, true, true
	}
	vals, _ := url.ParseQuery(q.rawQuery)
	q.page = canonicalPage(q.path, vals)
	return q
}

// httpClient requests random pages from this worker's server until ctx
// ends, and checks every reply.
func (s *web) httpClient(ctx context.Context, r *rand.Rand) {
	for pause(ctx, time.Duration(r.IntN(10))*time.Millisecond) {
		s.fetch(ctx, randomRequest(r))
	}
}

// fetch makes one request and checks its reply.
func (s *web) fetch(ctx context.Context, q httpRequest) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	target := q.path
	if q.rawQuery != "" {
		target += "?" + q.rawQuery
	}
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, s.base+target, nil)
	if err != nil {
		s.w.countErr("HTTP request", err)
		return
	}
	req.Host = httpHost
	req.Header.Set("X-User", q.user)
	if q.cookie {
		req.Header.Set("Cookie", "session="+q.user)
	}
	s.requests.Add(1)
	resp, err := s.client.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			s.w.countErr("HTTP GET", err)
		}
		return
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		if ctx.Err() == nil {
			s.w.countErr("HTTP body", err)
		}
		return
	}
	xc := resp.Header.Get("X-Cache")
	s.mu.Lock()
	s.xcache[cmp.Or(xc, "(none)")]++
	s.mu.Unlock()
	if resp.StatusCode >= 500 {
		s.w.countErr("HTTP status", fmt.Errorf("%d %s", resp.StatusCode, strings.TrimSpace(string(body))))
		return
	}
	if why := q.check(resp, string(body), xc); why != "" {
		s.wrong.Add(1)
		s.w.sample(fmt.Sprintf("%s: GET %s (X-User %s, cookie %v): %s; X-Cache %q, body %q",
			s.w.name(), target, q.user, q.cookie, why, xc, strings.TrimSpace(string(body))))
		return
	}
	if by := bodyField(string(body), "by"); (xc == "HIT" || xc == "STALE") && by != s.w.name() {
		s.elsewhere.Add(1)
	}
}

// check says what is wrong with a reply to q, or "".
func (q httpRequest) check(resp *http.Response, body, xc string) string {
	switch {
	case resp.StatusCode != http.StatusOK:
		return fmt.Sprintf("status %d", resp.StatusCode)
	case bodyField(body, "page") != q.page:
		return "a body for page " + strconv.Quote(bodyField(body, "page")) + ", want " + strconv.Quote(q.page)
	case q.perUser && bodyField(body, "user") != q.user:
		return "a body for user " + strconv.Quote(bodyField(body, "user"))
	case !q.perUser && bodyField(body, "user") != "":
		return "a public page names a user"
	case (q.neverCached || q.cookie) && (xc == "HIT" || xc == "STALE"):
		return "a private, Set-Cookie or Cookie exchange answered from the cache"
	case q.setsCookie && !hasCookie(resp, q):
		return "no Set-Cookie for this user"
	}
	return ""
}

func hasCookie(resp *http.Response, q httpRequest) bool {
	want := q.user + "-" + strings.TrimPrefix(q.path, "/c/")
	for _, c := range resp.Cookies() {
		if c.Name == "seen" && c.Value == want {
			return true
		}
	}
	return false
}

// bodyField returns the value of "name=value" in a body, or "".
func bodyField(body, name string) string {
	for _, f := range strings.Fields(body) {
		if k, v, ok := strings.Cut(f, "="); ok && k == name {
			return v
		}
	}
	return ""
}

// webReport is the HTTP part of a worker's report.
type webReport struct {
	Requests  int64            `json:"requests"`                // replies received or requests failed
	Renders   int64            `json:"renders"`                 // handler calls, background refreshes included
	XCache    map[string]int64 `json:"x_cache"`                 // replies by X-Cache
	Elsewhere int64            `json:"hits_rendered_elsewhere"` // HIT or STALE replies rendered by another worker
	Wrong     int64            `json:"wrong_responses"`         // replies for another page or user, or cached when they must not be
	Cache     cache.Stats      `json:"cache"`                   // of the middleware's Cache
}

func (s *web) report() webReport {
	r := webReport{Requests: s.requests.Load(), Renders: s.renders.Load(), Elsewhere: s.elsewhere.Load(),
		Wrong: s.wrong.Load(), XCache: map[string]int64{}, Cache: s.c.Stats()}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, v := range s.xcache {
		r.XCache[k] = v
	}
	return r
}
