package middleware_test

import (
	"bufio"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/middleware"
)

// The unexported parts (the Cache-Control parser, the key builder) are
// fuzzed in fuzz_internal_test.go; this target goes through the public
// API, with a real cache on miniredis (in-process, so each input takes
// about a millisecond).

// fuzzRequest parses a GET for target with a Host and an X-User header
// (a line for each line of user) and the extra header lines (each ending
// in CRLF) the way net/http's server does, or reports that it would not
// get that far.
func fuzzRequest(target, host, user, extra string) (*http.Request, bool) {
	if strings.ContainsAny(target, " \r\n") || strings.ContainsAny(user, "\r") {
		return nil, false
	}
	raw := "GET " + target + " HTTP/1.1\r\nHost: " + host + "\r\n"
	for line := range strings.SplitSeq(user, "\n") {
		raw += "X-User: " + line + "\r\n"
	}
	r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw + extra + "\r\n")))
	if err != nil {
		return nil, false
	}
	return r, true
}

// variesOn reports whether a Vary field value names header (or is "*").
func variesOn(vary, header string) bool {
	for _, name := range strings.Split(vary, ",") {
		name = strings.TrimSpace(name)
		if name == "*" || strings.EqualFold(name, header) {
			return true
		}
	}
	return false
}

// headerValuesFold returns the values of every field of h named name in
// any letter case.
func headerValuesFold(h http.Header, name string) []string {
	var out []string
	for k, vs := range h {
		if strings.EqualFold(k, name) {
			out = append(out, vs...)
		}
	}
	return out
}

// Bits of FuzzMiddleware's form argument.
const (
	formLowerCase     = 1 << iota // the handler writes its header names in lower case, into the map
	formSetCookie                 // the handler sets a cookie for its user
	formMounted                   // the users reach the handler through two StripPrefix mounts
	formIgnoreQuery               // Options.IgnoreQuery is {"utm"}
	formValidators                // the first user sends If-None-Match and If-Modified-Since
	formTrailerCookie             // the handler sets a cookie for its user as a trailer (http.TrailerPrefix)
	formCookieLines               // the first user sends an empty Cookie line, then its session's
	formAuthLines                 // the first user sends an empty Authorization line, then its token's
)

// credOfA is the first user's session and token (formCookieLines,
// formAuthLines), which no response to the second user may show.
const credOfA = "cred-of-a"

// FuzzMiddleware: for any request target, any Cache-Control and Vary from
// the handler (their names in any letter case), with or without a cookie
// set, and any two users asking for the same URL one after the other (or
// for the same path through two StripPrefix mounts of one Middleware),
// nothing panics, each response was rendered for the URL and mount asked
// for, the first user's for the first user, and the second user gets the
// first one's response only when it does not vary on X-User and sets no
// cookie. Neither a parameter left out of the key nor a client's
// validators reach a response that came through the cache. A user may
// send X-User on several lines (a "\n" in its value); the handler sees
// the first, so a second user whose one line joins the first one's lines
// must not get the first one's response when it varies on X-User. A
// credential on any line of Cookie or Authorization keeps the first
// user's response from the second.
func FuzzMiddleware(f *testing.F) {
	for _, seed := range []struct {
		target, cc, vary, a, b string
		form                   uint8
	}{
		{"/a?x=1&y=2", "max-age=60", "X-User", "alice", "bob", 0},
		{"/a?y=2&x=1", "", "", "alice", "bob", 0},
		{"/p", "private", "", "alice", "bob", 0},
		{"/v", "max-age=60", "accept-encoding, x-user", "alice", "alice", 0},
		{"/v", "s-maxage=10, stale-while-revalidate=5", "*", "", "bob", 0},
		{"/q?a=%zz", "max-age=60", "", "a", "b", 0},
		{"/%7E/caf%C3%A9", `max-age="60, private`, "X-User,", "\u00a0alice", "alice", 0},
		{"/x", "max-age=99999999999999999999", "X-User", "alice ", " alice", 0},
		{"/n", "no-cache, max-age=60", "x-user", "a, b", "a", 0},
		// Issue 10: header names in lower case, cookies, mounts, ignored
		// parameters, revalidating clients, repeated parameters.
		{"/lc", "private, no-store", "", "alice", "bob", formLowerCase},
		{"/lc", "max-age=60", "x-user", "alice", "bob", formLowerCase},
		{"/sc", "public, max-age=60", "", "alice", "bob", formSetCookie | formLowerCase},
		{"/sc", "public, max-age=60", "", "alice", "alice", formSetCookie},
		{"/stats", "max-age=60", "", "alice", "bob", formMounted},
		{"/stats?utm=%3Cscript%3E&id=1", "max-age=60", "", "alice", "bob", formMounted | formIgnoreQuery},
		{"/landing?utm=evil&id=1&utm=x", "", "", "alice", "bob", formIgnoreQuery},
		{"/rv", "max-age=60", "", "alice", "bob", formValidators},
		// Issue 23: CDN-Cache-Control ("Cache-Control|CDN-Cache-Control")
		// never shares what is not to be shared.
		{"/cdn", "no-store|max-age=60", "", "alice", "bob", 0},
		{"/cdn", "private|max-age=60", "X-User", "alice", "bob", formSetCookie},
		{"/cdn", "|max-age=60, public", "", "alice", "bob", formAuthLines | formCookieLines},
		{"/cdn", "max-age=60|max-age=\"60\", &&", "x-user", "alice", "bob", formLowerCase | formTrailerCookie},
		{"/r?id=2&id=1", "max-age=60", "", "alice", "bob", formValidators | formIgnoreQuery},
		{"/a%2Fb/c", "", "VARY", "alice", "bob", formMounted | formLowerCase | formSetCookie},
		// The hostile review of issue 10: opaque and user-info targets,
		// cookies sent as trailers.
		{"http:first-resource", "max-age=60", "", "alice", "bob", 0},
		{"http://alice@h.example/x", "max-age=60", "", "alice", "bob", 0},
		{"/tc", "public, max-age=60", "", "alice", "bob", formTrailerCookie},
		{"/tc", "public, max-age=60", "", "alice", "bob", formTrailerCookie | formLowerCase},
		// Issue 15: a first response with Vary (stored under its variant,
		// a marker under the plain key), stale windows with s-maxage,
		// must-understand.
		{"/vf", "max-age=60", "X-User", "alice", "bob", 0},
		{"/vf", "max-age=60", "x-user, X-USER", "bob", "bob", formLowerCase},
		{"/sm", "s-maxage=5, stale-if-error=10, stale-while-revalidate=5", "", "alice", "bob", 0},
		{"/mu", "must-understand, no-store, max-age=60", "X-User", "alice", "bob", 0},
		// Issue 15, phase 2: responses kept to be revalidated (validators
		// from the client must never reach a render), no-cache with a
		// validator, must-revalidate past freshness.
		{"/rk", "max-age=1, must-revalidate", "X-User", "alice", "bob", formValidators},
		{"/rn", "no-cache", "x-user", "alice", "bob", formValidators | formLowerCase},
		{"/rs", "s-maxage=1, proxy-revalidate", "", "alice", "bob", formValidators | formSetCookie},
		// Issue 22: field lines. Credentials on a second line, after an
		// empty one; a Vary'd field on two lines against the same values
		// on one line.
		{"/cl", "public, max-age=60", "", "alice", "bob", formCookieLines},
		{"/al", "public, max-age=60", "", "alice", "bob", formAuthLines},
		{"/cal", "max-age=60", "X-User", "alice", "alice", formCookieLines | formAuthLines | formLowerCase},
		{"/vl", "max-age=60", "X-User", "alice\nbob", "alice, bob", 0},
		{"/vl", "max-age=60", "x-user", "alice\n", "alice", 0},
		{"/vl", "max-age=60", "X-User", "alice\n\nbob", "alice\nbob", formValidators},
		{"/vl", "max-age=60", "", "alice\nbob", "alice, bob", formCookieLines},
		// Issue 39: a response's own stale-if-error is grace, never a
		// stale window; with s-maxage, with validators, varied.
		{"/sie", "max-age=1, stale-if-error=60", "", "alice", "bob", 0},
		{"/sie", "s-maxage=1, stale-if-error=60, stale-while-revalidate=1", "X-User", "alice", "alice", formValidators},
		{"/sie", "max-age=0, must-revalidate, stale-if-error=60", "x-user", "alice", "bob", formLowerCase | formSetCookie},
	} {
		f.Add(seed.target, seed.cc, seed.vary, seed.a, seed.b, seed.form)
	}
	s := redistest.Shared(f, redistest.Miniredis)
	c, err := cache.New(s.Client(f), &cache.Options{Namespace: "mwfuzz" + strings.TrimPrefix(redistest.Key(f, ""), "test:")})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = c.Close() })
	var inputs atomic.Int64

	f.Fuzz(func(t *testing.T, target, cc, vary, userA, userB string, form uint8) {
		if strings.ContainsAny(cc+vary, "\r\n") {
			return // net/http would not send these headers as they are
		}
		mounted := form&formMounted != 0
		if mounted && !strings.HasPrefix(target, "/") {
			return // only an origin-form path can be mounted
		}
		mountA, mountB := "", ""
		if mounted {
			mountA, mountB = "/m1", "/m2"
		}
		host := fmt.Sprintf("in%d.fuzz.example", inputs.Add(1)) // keys of its own
		var credA string
		if form&formCookieLines != 0 {
			credA += "Cookie: \r\nCookie: session=" + credOfA + "\r\n"
		}
		if form&formAuthLines != 0 {
			credA += "Authorization: \r\nAuthorization: Bearer " + credOfA + "\r\n"
		}
		plain, okP := fuzzRequest(target, host, userA, "")
		reqA, okA := fuzzRequest(mountA+target, host, userA, credA)
		reqB, okB := fuzzRequest(mountB+target, host, userB, "")
		if !okP || !okA || !okB {
			return
		}
		if form&formValidators != 0 {
			reqA.Header.Set("If-None-Match", "*")
			reqA.Header.Set("If-Modified-Since", "Mon, 02 Jan 2006 15:04:05 GMT")
		}
		o := &middleware.Options{StoreLimit: 1 << 16, Targeted: []string{"CDN-Cache-Control"}, Freshness: middleware.FreshnessPolicy{StaleIfError: time.Minute},
			Tags: middleware.TagPolicy{Headers: []string{"Surrogate-Key"}}}
		if form&formIgnoreQuery != 0 {
			o.Keys.IgnoreQuery = []string{"utm"}
		}
		m, err := middleware.New(c, o)
		if err != nil {
			t.Fatal(err)
		}
		name := func(n string) string {
			if form&formLowerCase != 0 {
				return strings.ToLower(n)
			}
			return n
		}
		var renders atomic.Int32
		handler := func(mount string) http.Handler {
			return m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				// "a|b": Cache-Control a, CDN-Cache-Control b (Targeted).
				if ccv, cdn, targeted := strings.Cut(cc, "|"); targeted {
					if ccv != "" {
						w.Header()[name("Cache-Control")] = []string{ccv}
					}
					w.Header()[name("CDN-Cache-Control")] = []string{cdn}
				} else if cc != "" {
					w.Header()[name("Cache-Control")] = []string{cc}
				}
				if vary != "" {
					w.Header()[name("Vary")] = []string{vary}
					// Tags from the Vary field: any value, valid or not, is
					// stripped from what the client gets.
					w.Header()[name("Surrogate-Key")] = []string{vary}
				}
				if form&formSetCookie != 0 {
					w.Header()[name("Set-Cookie")] = []string{"u=" + url.QueryEscape(r.Header.Get("X-User"))}
				}
				if form&formTrailerCookie != 0 {
					w.Header()[name(http.TrailerPrefix+"Set-Cookie")] = []string{"u=" + url.QueryEscape(r.Header.Get("X-User"))}
				}
				fmt.Fprintf(w, "mount=%s path=%s user=%s n=%d cred=%q cond=%s q=%s", mount, r.URL.EscapedPath(), r.Header.Get("X-User"), renders.Add(1),
					append(r.Header.Values("Cookie"), r.Header.Values("Authorization")...),
					r.Header.Get("If-None-Match")+r.Header.Get("If-Modified-Since"), r.URL.RawQuery)
			}))
		}
		hA, hB := handler(mountA), handler(mountB)
		if mounted {
			hA, hB = http.StripPrefix(mountA, hA), http.StripPrefix(mountB, hB)
		} else {
			hB = hA
		}
		serve := func(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			if rec.Code != http.StatusOK && rec.Code != http.StatusNotModified {
				t.Fatalf("status %d for %q", rec.Code, target)
			}
			return rec
		}
		for _, tt := range []struct {
			r     *http.Request
			h     http.Handler
			mount string
		}{{reqA, hA, mountA}, {reqB, hB, mountB}} {
			rec := serve(tt.h, tt.r)
			if rec.Code == http.StatusNotModified {
				if tt.r != reqA || rec.Body.Len() > 0 || rec.Header().Get("X-Cache") == "BYPASS" {
					t.Errorf("GET %q: 304 (X-Cache %s) with %d bytes for a request without validators", target, rec.Header().Get("X-Cache"), rec.Body.Len())
				}
				continue
			}
			if tags := headerValuesFold(rec.Header(), "Surrogate-Key"); len(tags) > 0 {
				t.Errorf("GET %q: the tag field reached the client: %q", target, tags)
			}
			body := rec.Body.String()
			user := tt.r.Header.Get("X-User")
			want := fmt.Sprintf("mount=%s path=%s user=", tt.mount, plain.URL.EscapedPath())
			if tt.r == reqA || variesOn(vary, "X-User") || form&(formSetCookie|formTrailerCookie) != 0 {
				want += user + " n="
			}
			if !strings.HasPrefix(body, want) {
				t.Errorf("GET %q by %q (Cache-Control %q, Vary %q, form %#x): got %q, want %q...", tt.mount+target, user, cc, vary, form, body, want)
			}
			if form&formSetCookie != 0 {
				cookies := headerValuesFold(rec.Header(), "Set-Cookie")
				if len(cookies) != 1 || cookies[0] != "u="+url.QueryEscape(user) {
					t.Errorf("GET %q by %q: Set-Cookie %q, want the user's own", tt.mount+target, user, cookies)
				}
			}
			if tt.r == reqB && strings.Contains(body, credOfA) {
				t.Errorf("GET %q: the second user got the response rendered for the first one's credentials: %q", target, body)
			}
			if rec.Header().Get("X-Cache") != "BYPASS" && !strings.Contains(body, " cond= q=") {
				t.Errorf("GET %q: the handler saw a client's validators in a cached response: %q", target, body)
			}
			if _, q, _ := strings.Cut(body, " q="); form&formIgnoreQuery != 0 && rec.Header().Get("X-Cache") != "BYPASS" {
				if v, err := url.ParseQuery(q); err == nil && v.Has("utm") {
					t.Errorf("GET %q: the handler saw the ignored parameter in a cached response: %q", target, body)
				}
			}
		}
	})
}

// Bits of FuzzRender's form argument.
const (
	renderHeadRoute = 1 << iota // a "HEAD /" ServeMux route of its own, asked first
	renderHeadFirst             // a HEAD is the first request (answered by the GET route without renderHeadRoute)
	renderFlush                 // the GET handler flushes halfway through its body (a hint: it is stored all the same)
)

// fuzzMethodRequest parses a request as net/http's server does, or
// reports that it would not get that far.
func fuzzMethodRequest(method, target, host string) (*http.Request, bool) {
	if strings.ContainsAny(target, " \r\n") || target == "" {
		return nil, false
	}
	r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(method + " " + target + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n")))
	if err != nil {
		return nil, false
	}
	return r, true
}

// FuzzRender: whatever length a handler declares for the body it writes
// (short bodies, long ones), whether it flushes halfway, whether a HEAD
// comes first and whether it has a route of its own, and whatever
// Location a write is answered with, a response served from the cache is
// complete (as long as its Content-Length and as the handler declared
// it), rendered for a GET of its URL, and a write evicts the URL its
// Location resolves to against the write's URL. A complete response that
// flushed is stored all the same (a flush is a hint).
func FuzzRender(f *testing.F) {
	for _, seed := range []struct {
		target, body, location string
		delta                  int16
		form                   uint8
	}{
		{"/a", "page", "", 0, 0},
		{"/a", "page", "", -3, 0},
		{"/a", "page", "", 700, 0},
		{"/a", "", "", 1000, 0},
		{"/a", "page", "", 5, renderHeadFirst},
		{"/h", "page", "", 0, renderHeadRoute | renderHeadFirst},
		{"/h", "", "", 0, renderHeadFirst},
		{"/items/", "x", "42", 0, 0},
		{"/items/a/", "x", "../b", 0, 0},
		{"/items?x=1", "x", "?x=2", 0, 0},
		{"/items/1", "x", "//other.example/items/2", 0, 0},
		{"/items/1", "x", "https://HOST/items/2", 0, 0},
		{"/items/1", "x", "http://HOST/items/2#f", 0, 0},
		{"/a/b/c", "x", "./../../d?e", -1, renderHeadRoute | renderHeadFirst},
		{"/f", "flushed", "", 0, renderFlush},
		{"/f", "flushed", "", -2, renderFlush},
		{"/f", "flushed", "", 4, renderFlush | renderHeadFirst},
	} {
		f.Add(seed.target, seed.body, seed.location, seed.delta, seed.form)
	}
	s := redistest.Shared(f, redistest.Miniredis)
	c, err := cache.New(s.Client(f), &cache.Options{Namespace: "mwfuzzr" + strings.TrimPrefix(redistest.Key(f, ""), "test:")})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = c.Close() })
	var inputs atomic.Int64

	f.Fuzz(func(t *testing.T, target, body, location string, delta int16, form uint8) {
		if strings.ContainsAny(location, "\r\n") || len(body) > 1<<12 {
			return
		}
		host := fmt.Sprintf("in%d.fuzz.example", inputs.Add(1)) // keys of its own
		location = strings.ReplaceAll(location, "HOST", host)
		m, err := middleware.New(c, nil)
		if err != nil {
			t.Fatal(err)
		}
		var renders atomic.Int32
		get := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			page := fmt.Sprintf("uri=%s n=%d %s", r.RequestURI, renders.Add(1), body)
			w.Header().Set("Cache-Control", "max-age=60")
			if n := len(page) + int(delta); delta != 0 && n >= 0 {
				w.Header().Set("Content-Length", fmt.Sprint(n))
			}
			if form&renderFlush != 0 {
				_, _ = fmt.Fprint(w, page[:len(page)/2])
				_ = http.NewResponseController(w).Flush()
				page = page[len(page)/2:]
			}
			_, _ = fmt.Fprint(w, page)
		})
		head := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Cache-Control", "max-age=60")
		})
		post := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Location", location)
			w.WriteHeader(http.StatusCreated)
		})
		mux := http.NewServeMux()
		mux.Handle("GET /", m.Handler(get))
		mux.Handle("POST /", m.Handler(post))
		if form&renderHeadRoute != 0 {
			mux.Handle("HEAD /", m.Handler(head))
		}
		do := func(method, target string) (*httptest.ResponseRecorder, bool) {
			r, ok := fuzzMethodRequest(method, target, host)
			if !ok {
				return nil, false
			}
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, r)
			return rec, true
		}
		// complete checks an answer from the cache (or that will be
		// stored): a GET render of target, as long as it says.
		complete := func(rec *httptest.ResponseRecorder, target string) {
			t.Helper()
			switch rec.Header().Get("X-Cache") {
			case "HIT", "MISS", "STALE":
			default:
				return
			}
			if delta != 0 && len(rec.Body.String())+int(delta) >= 0 {
				t.Errorf("GET %q: %s of a body %d bytes off its declared length", target, rec.Header().Get("X-Cache"), delta)
			}
			if cl := rec.Header().Get("Content-Length"); cl != fmt.Sprint(rec.Body.Len()) {
				t.Errorf("GET %q: %s with Content-Length %s and %d bytes", target, rec.Header().Get("X-Cache"), cl, rec.Body.Len())
			}
			if !strings.HasPrefix(rec.Body.String(), "uri=") {
				t.Errorf("GET %q: %s with %q, not a GET's render", target, rec.Header().Get("X-Cache"), rec.Body.String())
			}
		}
		if form&renderHeadFirst != 0 {
			if _, ok := do(http.MethodHead, target); !ok {
				return
			}
		}
		for range 2 {
			rec, ok := do(http.MethodGet, target)
			if !ok {
				return
			}
			complete(rec, target)
			if cs := rec.Header().Get("Cache-Status"); form&renderFlush != 0 && delta == 0 && strings.Contains(cs, "not-stored") {
				// A flush is a hint: a complete response is stored all the same.
				t.Errorf("GET %q, flushed: Cache-Status %q", target, cs)
			}
		}

		// A write answered with location evicts what it resolves to, on
		// the same origin.
		base, err := url.ParseRequestURI(target)
		if err != nil || base.Opaque != "" || base.User != nil {
			return
		}
		base.Scheme, base.Host = "http", host
		ref, err := base.Parse(strings.TrimSpace(location))
		if err != nil || ref.Scheme != "http" || ref.Host != host || ref.User != nil || ref.Opaque != "" {
			return
		}
		resolved := ref.RequestURI()
		if rec, ok := do(http.MethodGet, resolved); !ok || rec.Code != http.StatusOK {
			return
		}
		if rec, ok := do(http.MethodPost, target); !ok || rec.Code != http.StatusCreated {
			return
		}
		if rec, ok := do(http.MethodGet, resolved); ok && rec.Header().Get("X-Cache") == "HIT" {
			t.Errorf("POST %q answered Location %q: GET %q is still a HIT", target, location, resolved)
		}
	})
}
