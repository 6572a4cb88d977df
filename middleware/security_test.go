package middleware_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/middleware"
)

// This file holds the security matrix: whatever the requests and the
// handler's response headers, no client may receive a response that was
// rendered for another client when it must not be shared, and nothing a
// client sends outside the key may shape what other clients receive.

// storedText returns the raw entry for path on the server ("" if none),
// to check what was stored, not just what was served.
func (b *testBed) storedText(tb testing.TB, path string, vary ...string) string {
	tb.Helper()
	raw, err := b.rc.Get(context.Background(), b.valueKey(path, vary...)).Result()
	if err != nil && err.Error() != "redis: nil" {
		tb.Fatal(err)
	}
	return raw
}

func TestSecurity_authorization(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		var renders atomic.Int32
		b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// A response that says it may be shared: requests with
			// Authorization still bypass the cache both ways.
			w.Header().Set("Cache-Control", "public, max-age=60")
			fmt.Fprintf(w, "n=%d auth=%q", renders.Add(1), r.Header.Get("Authorization"))
		}), &bedOptions{procs: 2})

		b.get(t, "/a", "Authorization", "Bearer alice").check(t, 200, "BYPASS", `n=1 auth="Bearer alice"`)
		b.get(t, "/a", procHeader, "1").check(t, 200, "MISS", `n=2 auth=""`)
		b.get(t, "/a", "Authorization", "Bearer carol").check(t, 200, "BYPASS", `n=3 auth="Bearer carol"`)
		b.get(t, "/a", "authorization", "Basic ZGF2ZTpwdw==", procHeader, "1").check(t, 200, "BYPASS", `n=4 auth="Basic ZGF2ZTpwdw=="`)
		b.get(t, "/a").check(t, 200, "HIT", `n=2 auth=""`)
		if raw := b.storedText(t, "/a"); strings.Contains(raw, "Bearer") || strings.Contains(raw, "Basic") {
			t.Errorf("the stored entry holds credentials: %q", raw)
		}
	}, redistest.Redis8, redistest.Cluster)
}

func TestSecurity_requestCookies(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	tests := []struct {
		name  string
		cache bool // Options.CacheRequestsWithCookies
	}{
		{"bypass by default", false},
		{"CacheRequestsWithCookies", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var renders atomic.Int32
			b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprintf(w, "n=%d cookie=%q", renders.Add(1), r.Header.Get("Cookie"))
			}), &bedOptions{mw: &middleware.Options{CacheRequestsWithCookies: tt.cache}})
			if !tt.cache {
				b.get(t, "/c", "Cookie", "session=alice").check(t, 200, "BYPASS", `n=1 cookie="session=alice"`)
				b.get(t, "/c").check(t, 200, "MISS", `n=2 cookie=""`)
				b.get(t, "/c", "Cookie", "session=bob").check(t, 200, "BYPASS", `n=3 cookie="session=bob"`)
				b.get(t, "/c").check(t, 200, "HIT", `n=2 cookie=""`)
				return
			}
			// Stored, as the option says: only for handlers whose
			// responses do not depend on cookies.
			b.get(t, "/c", "Cookie", "theme=dark").check(t, 200, "MISS", `n=1 cookie="theme=dark"`)
			b.get(t, "/c").check(t, 200, "HIT", `n=1 cookie="theme=dark"`)
			b.get(t, "/c", "Cookie", "theme=light").check(t, 200, "HIT", `n=1 cookie="theme=dark"`)
		})
	}
}

// TestSecurity_credentialFieldLines: a request may send a field on
// several lines, and net/http hands the handler every one (r.Cookie and
// r.Cookies read them all, a framework may read the last). A credential
// or a bypass on any line but the first made the request look anonymous:
// the page rendered for it was stored and served to everyone. Every line
// counts; an empty one does not make the field absent.
func TestSecurity_credentialFieldLines(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	tests := []struct {
		name  string
		lines string // the field lines the first client sends
		seen  string // what the handler shows of them
	}{
		{"Cookie", "Cookie: \r\nCookie: session=alice\r\n", `Cookie=["" "session=alice"]`},
		{"Authorization", "Authorization: \r\nAuthorization: Bearer alice\r\n", `Authorization=["" "Bearer alice"]`},
		{"Upgrade", "Upgrade: \r\nUpgrade: alice-proto\r\nConnection: upgrade\r\n", `Upgrade=["" "alice-proto"]`},
		{"Cache-Control no-store", "Cache-Control: \r\nCache-Control: no-store, alice\r\n", `Cache-Control=["" "no-store, alice"]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var renders atomic.Int32
			b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Cache-Control", "public, max-age=60")
				fmt.Fprintf(w, "n=%d", renders.Add(1))
				for _, name := range []string{"Cookie", "Authorization", "Upgrade", "Cache-Control"} {
					if vs := r.Header.Values(name); vs != nil {
						fmt.Fprintf(w, " %s=%q", name, vs)
					}
				}
				if c, err := r.Cookie("session"); err == nil {
					fmt.Fprintf(w, " session=%s", c.Value)
				}
			}), nil)
			host := b.srv.Listener.Addr().String()
			want := "n=1 " + tt.seen
			if strings.HasPrefix(tt.name, "Cookie") {
				want += " session=alice"
			}
			b.rawRequest(t, "GET /cl HTTP/1.1\r\nHost: "+host+"\r\n"+tt.lines+"Connection: close\r\n\r\n").
				check(t, 200, "BYPASS", want)
			b.get(t, "/cl").check(t, 200, "MISS", "n=2")
			if raw := b.storedText(t, "/cl"); strings.Contains(raw, "alice") {
				t.Errorf("the stored entry holds the first client's field: %q", raw)
			}
		})
	}
}

// TestMiddleware_clientNoCacheFieldLines: with AllowNoCache, a client's
// Pragma: no-cache forces a render on whichever line it comes (it was
// read from the first line only).
func TestMiddleware_clientNoCacheFieldLines(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	var renders atomic.Int32
	b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		fmt.Fprintf(w, "n=%d", renders.Add(1))
	}), &bedOptions{mw: &middleware.Options{AllowNoCache: true}})
	host := b.srv.Listener.Addr().String()
	b.get(t, "/pn").check(t, 200, "MISS", "n=1")
	b.waitStored(t, "/pn", "n=1")
	b.rawRequest(t, "GET /pn HTTP/1.1\r\nHost: "+host+"\r\nPragma: \r\nPragma: no-cache\r\nConnection: close\r\n\r\n").
		check(t, 200, "MISS", "n=2")
}

// TestSecurity_setCookie: a response that sets a cookie is never stored
// and never handed to another client, not even to one that was waiting
// for the same render.
func TestSecurity_setCookie(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testContext(t, 20*time.Second)
		g := newRenderGate(ctx, 3)
		b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := g.next()
			w.Header().Set("Cache-Control", "public, max-age=60")
			http.SetCookie(w, &http.Cookie{Name: "session", Value: "s" + strconv.Itoa(int(n)), Path: "/"})
			fmt.Fprintf(w, "n=%d", n)
		}), &bedOptions{procs: 2, cache: &cache.Options{PollInterval: 5 * time.Second}})
		cookie := func(r reply) string { return r.header.Get("Set-Cookie") }

		a := b.get(t, "/sc")
		a.check(t, 200, "BYPASS", "n=1")
		if got := cookie(a); got != "session=s1; Path=/" {
			t.Errorf("first client's Set-Cookie = %q", got)
		}
		b.waitGone(t, "/sc")
		c := b.get(t, "/sc", procHeader, "1")
		c.check(t, 200, "BYPASS", "n=2")
		if got := cookie(c); got != "session=s2; Path=/" {
			t.Errorf("second client's Set-Cookie = %q, want its own", got)
		}
		b.waitGone(t, "/sc")

		// Concurrently: clients waiting for a render that sets a cookie,
		// in its process and in another, render for themselves.
		first := b.goSend(ctx, "GET", "/sc")
		redistest.Recv(t, ctx, g.started, "the render")
		var waiters []<-chan sent
		for i := range 4 {
			waiters = append(waiters, b.goSend(ctx, "GET", "/sc", procHeader, strconv.Itoa(i%2)))
		}
		redistest.WaitFor(t, ctx, "the waiters", func() bool {
			st := b.stats()
			return st.Misses == 7 && st.Waits == 1
		})
		g.open()
		r := redistest.Recv(t, ctx, first, "the rendering client")
		if r.err != nil {
			t.Fatal(r.err)
		}
		r.check(t, 200, "BYPASS", "n=3")
		seen := map[string]bool{cookie(r.reply): true}
		for _, ch := range waiters {
			w := redistest.Recv(t, ctx, ch, "a waiter")
			if w.err != nil {
				t.Fatal(w.err)
			}
			n, _ := strconv.Atoi(strings.TrimPrefix(w.body, "n="))
			want := fmt.Sprintf("session=s%d; Path=/", n)
			if w.status != 200 || w.cache() != "BYPASS" || n < 4 || cookie(w.reply) != want || seen[want] {
				t.Errorf("waiter got %v with Set-Cookie %q; want its own render and cookie", w, cookie(w.reply))
			}
			seen[want] = true
		}
		b.waitGone(t, "/sc")
	}, redistest.Redis8, redistest.Valkey)
}

func TestSecurity_cacheControl(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	for _, cc := range []string{
		"private",
		"private, max-age=60",
		`private="Set-Cookie", max-age=60`,
		"no-store",
		"NO-STORE",
		"public, max-age=60, no-store",
		"no-cache",
		"public, no-cache, max-age=60",
		`no-cache="Set-Cookie", max-age=60`,
		"s-maxage=60, private",
	} {
		// The field name as the handler wrote it into the header map:
		// net/http sends any case as written.
		for _, name := range []string{"Cache-Control", "cache-control", "CACHE-control"} {
			t.Run(name+": "+cc, func(t *testing.T) {
				var renders atomic.Int32
				b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					w.Header()[name] = []string{cc}
					fmt.Fprintf(w, "for %s n=%d", r.Header.Get("X-User"), renders.Add(1))
				}), &bedOptions{procs: 2})
				a := b.get(t, "/cc", "X-User", "alice")
				a.check(t, 200, "BYPASS", "for alice n=1")
				if got := a.header.Get("Cache-Control"); got != cc {
					t.Errorf("Cache-Control passed through as %q", got)
				}
				b.get(t, "/cc", "X-User", "bob").check(t, 200, "BYPASS", "for bob n=2")
				b.get(t, "/cc", "X-User", "carol", procHeader, "1").check(t, 200, "BYPASS", "for carol n=3")
				b.waitGone(t, "/cc")
			})
		}
	}
}

// TestSecurity_vary: clients with different values of the headers a
// response varies on each get their own variant, in the process that
// learnt the Vary and in one that has not.
func TestSecurity_vary(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		for _, name := range []string{"Accept-Encoding", "X-User"} {
			t.Run(name, func(t *testing.T) {
				var renders atomic.Int32
				b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Vary", strings.ToLower(name)) // any case
					w.Header().Set("Cache-Control", "max-age=60")
					fmt.Fprintf(w, "n=%d %s=%q", renders.Add(1), name, r.Header.Get(name))
				}), &bedOptions{procs: 2})
				get := func(proc, value string) reply {
					t.Helper()
					if value == "" {
						return b.get(t, "/v", procHeader, proc)
					}
					return b.get(t, "/v", procHeader, proc, name, value)
				}
				// The first render is stored under its variant's key, the
				// plain key holding a marker with the Vary names (it is not
				// known before the render); a process that has seen the
				// Vary looks under the variant's key, one that has not
				// finds the marker and looks again.
				steps := []struct {
					proc, value, xcache string
					n                   int
				}{
					{"0", "alpha", "MISS", 1},
					{"0", "beta", "MISS", 2},
					{"0", "alpha", "HIT", 1},
					{"1", "alpha", "HIT", 1}, // a process that has not seen the Vary yet
					{"1", "beta", "HIT", 2},
					{"1", "", "MISS", 3},
					{"1", "gamma", "MISS", 4},
					{"0", "", "HIT", 3},
					{"0", "gamma", "HIT", 4},
					{"1", "Alpha", "MISS", 5},
					{"0", "alpha, beta", "MISS", 6},
					{"1", "alpha", "HIT", 1},
					// Look-alikes that net/http does not trim: other
					// clients' values must not find their variants.
					{"0", "\u00a0delta", "MISS", 7},
					{"1", "delta", "MISS", 8},
					{"0", "delta\u0085", "MISS", 9},
					{"1", "delta", "HIT", 8},
					{"0", "\u00a0delta", "HIT", 7},
				}
				for _, st := range steps {
					get(st.proc, st.value).check(t, 200, st.xcache, fmt.Sprintf("n=%d %s=%q", st.n, name, st.value))
				}
			})
		}
	}, redistest.Redis8, redistest.Cluster)
}

// TestSecurity_varyWaiter: a request waiting for a render for other
// values of a Vary header that its process did not know about yet gets
// its own variant.
func TestSecurity_varyWaiter(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testContext(t, 20*time.Second)
	g := newRenderGate(ctx, 1)
	b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := g.next()
		w.Header().Set("Vary", "X-User")
		fmt.Fprintf(w, "n=%d user=%s", n, r.Header.Get("X-User"))
	}), nil)
	alice := b.goSend(ctx, "GET", "/vw", "X-User", "alice")
	redistest.Recv(t, ctx, g.started, "alice's render")
	bob := b.goSend(ctx, "GET", "/vw", "X-User", "bob")
	redistest.WaitFor(t, ctx, "bob to wait", func() bool { return b.stats().Misses == 2 })
	g.open()
	for _, tt := range []struct {
		ch   <-chan sent
		body string
	}{{alice, "n=1 user=alice"}, {bob, "n=2 user=bob"}} {
		r := redistest.Recv(t, ctx, tt.ch, "a reply")
		if r.err != nil {
			t.Fatal(r.err)
		}
		r.check(t, 200, "MISS", tt.body)
	}
	b.get(t, "/vw", "X-User", "bob").check(t, 200, "HIT", "n=2 user=bob")
	b.get(t, "/vw", "X-User", "alice").check(t, 200, "HIT", "n=1 user=alice")
}

func TestSecurity_varyStar(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	for _, vary := range []string{"*", "X-User, *", "accept-encoding,*"} {
		t.Run(vary, func(t *testing.T) {
			var renders atomic.Int32
			b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Vary", vary)
				w.Header().Set("Cache-Control", "public, max-age=60")
				fmt.Fprintf(w, "n=%d", renders.Add(1))
			}), nil)
			b.get(t, "/vs", "X-User", "alice").check(t, 200, "BYPASS", "n=1")
			b.get(t, "/vs", "X-User", "alice").check(t, 200, "BYPASS", "n=2")
			b.get(t, "/vs").check(t, 200, "BYPASS", "n=3")
			b.waitGone(t, "/vs")
		})
	}
}

// rewriting are the request headers that frameworks and proxies use to
// rewrite hosts, URLs, schemes and methods.
var rewriting = []string{
	"Forwarded", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Forwarded-Scheme", "X-Forwarded-Port",
	"X-Forwarded-Prefix", "X-Host", "X-Original-Host", "X-Original-Url", "X-Rewrite-Url",
	"X-Http-Method-Override", "X-Http-Method", "X-Method-Override",
	"X-Forwarded-Uri", "X-Original-Uri", "X-Envoy-Original-Path", "X-Forwarded-Ssl", "Front-End-Https", "X-Url-Scheme",
}

// echoRewriting renders the values of the rewriting headers it sees, the
// way a framework would build absolute URLs or pick a route from them.
func echoRewriting(renders *atomic.Int32) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "n=%d", renders.Add(1))
		for _, name := range rewriting {
			if v := r.Header.Get(name); v != "" {
				fmt.Fprintf(w, " %s=%s", name, v)
			}
		}
	})
}

// TestSecurity_poisoning: unkeyed headers that rewrite URLs, hosts and
// methods, sent by one client, do not reach the render that is stored for
// everyone.
func TestSecurity_poisoning(t *testing.T) {
	tests := []struct{ name, value string }{
		{"X-Forwarded-Host", "evil.example"},
		{"X-Original-URL", "/evil"},
		{"X-Rewrite-URL", "/evil"},
		{"X-HTTP-Method-Override", "EVIL"},
		{"X-Method-Override", "EVIL"},
		{"Forwarded", "host=evil.example;proto=https"},
		{"X-Forwarded-Proto", "evil"},
		{"X-Forwarded-Scheme", "evil"},
		{"X-Forwarded-Prefix", "/evil"},
		{"X-Forwarded-Port", "6666"},
		{"X-Host", "evil.example"},
		{"X-Original-Host", "evil.example"},
		// Issue 22: more that proxies send for the original URL or
		// scheme.
		{"X-Forwarded-Uri", "/evil"},
		{"X-Original-URI", "/evil"},
		{"X-Envoy-Original-Path", "/evil"},
		{"X-Forwarded-Ssl", "on-evil"},
		{"Front-End-Https", "on-evil"},
		{"X-Url-Scheme", "evil"},
	}
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				var renders atomic.Int32
				b := newTestBed(t, s, echoRewriting(&renders), &bedOptions{procs: 2})
				attacker := b.get(t, "/p", tt.name, tt.value)
				attacker.check(t, 200, "MISS", "n=1")
				b.get(t, "/p", procHeader, "1").check(t, 200, "HIT", "n=1")
				b.get(t, "/p", tt.name, tt.value, procHeader, "1").check(t, 200, "HIT", "n=1")
				raw := b.storedText(t, "/p")
				if raw == "" || strings.Contains(strings.ToLower(raw), "evil") {
					t.Errorf("stored entry %q", raw)
				}
				for _, name := range rewriting {
					if strings.Contains(raw, name+"=") {
						t.Errorf("the stored entry shows the handler saw %s: %q", name, raw)
					}
				}
			})
		}
		t.Run("all at once", func(t *testing.T) {
			var renders atomic.Int32
			b := newTestBed(t, s, echoRewriting(&renders), nil)
			var hdr []string
			for _, tt := range tests {
				hdr = append(hdr, tt.name, tt.value)
			}
			b.get(t, "/all", hdr...).check(t, 200, "MISS", "n=1")
			b.get(t, "/all").check(t, 200, "HIT", "n=1")
		})
	}, redistest.Redis8, redistest.Valkey)
}

// TestSecurity_poisoningOtherCase: an outer middleware that puts the
// rewriting headers into the request's header map in another letter case
// (the map is the handler's to read) does not get them to the render that
// is stored for everyone either.
func TestSecurity_poisoningOtherCase(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	var renders atomic.Int32
	b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "n=%d", renders.Add(1))
		for name, vs := range r.Header { // as a framework reading the map would
			for _, rw := range rewriting {
				if strings.EqualFold(name, rw) {
					fmt.Fprintf(w, " %s=%s", rw, strings.Join(vs, ","))
				}
			}
		}
	}), &bedOptions{procs: 2, wrap: func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			for _, name := range rewriting {
				if vs := r.Header[name]; vs != nil {
					delete(r.Header, name)
					r.Header[strings.ToLower(name)] = vs
				}
			}
			next.ServeHTTP(w, r)
		})
	}})
	b.get(t, "/oc", "X-Forwarded-Host", "evil.example", "X-Original-URL", "/evil").check(t, 200, "MISS", "n=1")
	b.get(t, "/oc", procHeader, "1").check(t, 200, "HIT", "n=1")
	if raw := b.storedText(t, "/oc"); raw == "" || strings.Contains(raw, "evil") {
		t.Errorf("stored entry %q", raw)
	}
}

// TestSecurity_keyHeaders: a header named in Keys.Headers reaches the
// handler and is part of the key; the others are still removed.
func TestSecurity_keyHeaders(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	var renders atomic.Int32
	b := newTestBed(t, s, echoRewriting(&renders), &bedOptions{procs: 2,
		mw: &middleware.Options{Keys: middleware.KeyPolicy{Headers: []string{"x-forwarded-proto"}}}})
	steps := []struct {
		hdr  []string
		want string
		hit  bool
	}{
		{[]string{"X-Forwarded-Proto", "https"}, "n=1 X-Forwarded-Proto=https", false},
		{[]string{"X-Forwarded-Proto", "http"}, "n=2 X-Forwarded-Proto=http", false},
		{nil, "n=3", false},
		{[]string{"X-Forwarded-Proto", "https", procHeader, "1"}, "n=1 X-Forwarded-Proto=https", true},
		{[]string{procHeader, "1"}, "n=3", true},
		{[]string{"X-Forwarded-Proto", "https", "X-Forwarded-Host", "evil.example"}, "n=1 X-Forwarded-Proto=https", true},
		{[]string{"X-Forwarded-Proto", "http", "X-Forwarded-Host", "evil.example", procHeader, "1"}, "n=2 X-Forwarded-Proto=http", true},
		// A look-alike that net/http does not trim is another value.
		{[]string{"X-Forwarded-Proto", "\u00a0https"}, "n=4 X-Forwarded-Proto=\u00a0https", false},
		{[]string{"X-Forwarded-Proto", "https"}, "n=1 X-Forwarded-Proto=https", true},
	}
	for i, st := range steps {
		xcache := "MISS"
		if st.hit {
			xcache = "HIT"
		}
		r := b.get(t, "/kh", st.hdr...)
		if r.status != 200 || r.cache() != xcache || r.body != st.want {
			t.Errorf("step %d %q: %v, want %s %q", i, st.hdr, r, xcache, st.want)
		}
	}
}

// TestSecurity_fieldLinesInKeys: a field sent on two lines ("User-Agent:
// A" and "User-Agent: B") is not the one line "A, B": a handler reading
// r.Header.Get sees only A. Keyed as one line, the render for the split
// field was served to every client sending "A, B" (with Vary: User-Agent,
// a UA split at its comma poisoned that browser's variant). Keys keep the
// lines apart, for Vary'd fields and Keys.Headers alike.
func TestSecurity_fieldLinesInKeys(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	const ua = "Mozilla/5.0 (Linux; Android 14) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Mobile Safari/537.36"
	split, rest, _ := strings.Cut(ua, ", ")
	tests := []struct {
		name, field string
		o           *middleware.Options
	}{
		{"Vary", "User-Agent", nil},
		{"KeyHeaders", "X-Tenant", &middleware.Options{Keys: middleware.KeyPolicy{Headers: []string{"x-tenant"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var renders atomic.Int32
			b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tt.o == nil {
					w.Header().Set("Vary", tt.field)
				}
				w.Header().Set("Cache-Control", "max-age=60")
				fmt.Fprintf(w, "n=%d %s", renders.Add(1), r.Header.Get(tt.field))
			}), &bedOptions{mw: tt.o})
			host := b.srv.Listener.Addr().String()
			send := func(lines ...string) reply {
				t.Helper()
				req := "GET /fl HTTP/1.1\r\nHost: " + host + "\r\n"
				for _, l := range lines {
					req += tt.field + ": " + l + "\r\n"
				}
				return b.rawRequest(t, req+"Connection: close\r\n\r\n")
			}
			send(ua).check(t, 200, "MISS", "n=1 "+ua)
			send(split, rest).check(t, 200, "MISS", "n=2 "+split)
			send(ua).check(t, 200, "HIT", "n=1 "+ua)
			send(split, rest).check(t, 200, "HIT", "n=2 "+split)
			// A line of its own is not an empty line, nor a value with
			// quotes that looks like two lines written into the key.
			send(split, "").check(t, 200, "MISS", "n=3 "+split)
			send(split).check(t, 200, "MISS", "n=4 "+split)
			send(`"`+split+`" "`+rest+`"`).check(t, 200, "MISS", `n=5 "`+split+`" "`+rest+`"`)
			send(split, rest).check(t, 200, "HIT", "n=2 "+split)
		})
	}
}

// TestSecurity_conditionalRequests: a request's validators and ranges do
// not shape the response stored for others, even when the options allow
// storing 304s. Validators never reach the render for the cache (the
// middleware answers If-None-Match and If-Modified-Since itself, and may
// ignore If-Match and If-Unmodified-Since as RFC 9110 13.1.1 and 13.1.4
// let a cache); a range request shares a render made without its Range
// and If-Range, and gets its range of the complete response stored.
func TestSecurity_conditionalRequests(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	lastModified := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	const content = "the full representation"
	always := func(int, http.Header) bool { return true }
	tests := []struct {
		name   string
		opts   middleware.Options
		hdr    []string
		status int
		xcache string
		body   string
	}{
		{"If-None-Match", middleware.Options{}, []string{"If-None-Match", `"v1"`}, 304, "MISS", ""},
		{"If-None-Match, Statuses with 304", middleware.Options{Statuses: []int{200, 304}}, []string{"If-None-Match", `"v1"`}, 304, "MISS", ""},
		{"If-None-Match, ShouldCache always", middleware.Options{ShouldCache: always}, []string{"If-None-Match", `"v1"`}, 304, "MISS", ""},
		{"If-Modified-Since, Statuses with 304", middleware.Options{Statuses: []int{200, 304}}, []string{"If-Modified-Since", lastModified.Format(http.TimeFormat)}, 304, "MISS", ""},
		{"If-Match, ShouldCache always", middleware.Options{ShouldCache: always}, []string{"If-Match", `"v0"`}, 200, "MISS", content},
		{"If-Unmodified-Since, Statuses with 412", middleware.Options{Statuses: []int{200, 412}}, []string{"If-Unmodified-Since", lastModified.Add(-time.Hour).Format(http.TimeFormat)}, 200, "MISS", content},
		{"Range, ShouldCache always", middleware.Options{ShouldCache: always}, []string{"Range", "bytes=0-2"}, 206, "MISS", "the"},
		{"If-Range and Range, Statuses with 206", middleware.Options{Statuses: []int{200, 206}}, []string{"Range", "bytes=0-2", "If-Range", `"v1"`}, 206, "MISS", "the"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var renders atomic.Int32
			opts := tt.opts
			b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("ETag", `"v1"`)
				w.Header().Set("X-Render", strconv.Itoa(int(renders.Add(1))))
				http.ServeContent(w, r, "", lastModified, strings.NewReader(content))
			}), &bedOptions{mw: &opts, procs: 2})
			first := b.get(t, "/cond", tt.hdr...)
			first.check(t, tt.status, tt.xcache, tt.body)
			stored := "1"
			if tt.xcache == "BYPASS" {
				// The handler answered the range; that answer is for
				// this client only.
				b.waitGone(t, "/cond")
				b.get(t, "/cond", procHeader, "1").check(t, 200, "MISS", content)
				stored = "2"
			} else {
				b.waitStored(t, "/cond", content)
			}
			for _, proc := range []string{"0", "1"} {
				r := b.get(t, "/cond", procHeader, proc)
				r.check(t, 200, "HIT", content)
				if got := r.header.Get("X-Render"); got != stored {
					t.Errorf("HIT from render %s, want the stored render %s", got, stored)
				}
			}
			// Once stored, If-None-Match and If-Modified-Since are
			// answered from the entry.
			for _, st := range []struct {
				hdr    []string
				status int
				body   string
			}{
				{[]string{"If-None-Match", `"v1"`}, 304, ""},
				{[]string{"If-None-Match", `"v0"`, "If-Modified-Since", lastModified.Format(http.TimeFormat)}, 200, content},
				{[]string{"If-Modified-Since", lastModified.Format(http.TimeFormat)}, 304, ""},
				{[]string{"If-Modified-Since", lastModified.Add(time.Hour).Format(http.TimeFormat)}, 304, ""},
				{[]string{"If-Modified-Since", lastModified.Add(-time.Second).Format(http.TimeFormat)}, 200, content},
				{[]string{"If-Modified-Since", "yesterday"}, 200, content},
			} {
				r := b.get(t, "/cond", append(st.hdr, procHeader, "1")...)
				r.check(t, st.status, "HIT", st.body)
				if got := r.header.Get("X-Render"); got != stored {
					t.Errorf("%q: from render %s, want the stored render %s", st.hdr, got, stored)
				}
			}
		})
	}
}

// TestSecurity_stripPrefixMounts: one Middleware behind two StripPrefix
// mounts keys on the URL as received, not on the path it is given
// (issue 10, 2); rewrites the key cannot see in the received URL (by a
// header) and a scheme or host set by an outer middleware make entries of
// their own.
func TestSecurity_stripPrefixMounts(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		var renders atomic.Int32
		page := func(name string) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprintf(w, "n=%d %s %s://%s%s", renders.Add(1), name, r.URL.Scheme, r.URL.Host, r.URL.Path)
			})
		}
		b := newTestBed(t, s, nil, &bedOptions{procs: 2,
			router: func(m *middleware.Middleware, _ *cache.Cache) http.Handler {
				mux := http.NewServeMux()
				mux.Handle("/admin/", http.StripPrefix("/admin", m.Handler(page("admin"))))
				mux.Handle("/public/", http.StripPrefix("/public", m.Handler(page("public"))))
				// An outer middleware that rewrites by a header, and one
				// that sets the scheme and host (as proxy-header
				// middlewares do).
				mux.Handle("/beta/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.Header.Get("X-Beta") == "1" {
						r.URL.Path = "/beta/new" + strings.TrimPrefix(r.URL.Path, "/beta")
					}
					m.Handler(page("beta")).ServeHTTP(w, r)
				}))
				mux.Handle("/abs/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.Header.Get("X-Test-Https") == "1" {
						r.URL.Scheme, r.URL.Host = "https", "secure.example"
					}
					m.Handler(page("abs")).ServeHTTP(w, r)
				}))
				return mux
			}})
		steps := []struct {
			path   string
			hdr    []string
			xcache string
			body   string
		}{
			{"/admin/stats", nil, "MISS", "n=1 admin :///stats"},
			{"/public/stats", nil, "MISS", "n=2 public :///stats"},
			{"/public/stats", []string{procHeader, "1"}, "HIT", "n=2 public :///stats"},
			{"/admin/stats", []string{procHeader, "1"}, "HIT", "n=1 admin :///stats"},
			{"/beta/x", []string{"X-Beta", "1"}, "MISS", "n=3 beta :///beta/new/x"},
			{"/beta/x", nil, "MISS", "n=4 beta :///beta/x"},
			{"/beta/x", []string{"X-Beta", "1", procHeader, "1"}, "HIT", "n=3 beta :///beta/new/x"},
			{"/abs/x", []string{"X-Test-Https", "1"}, "MISS", "n=5 abs https://secure.example/abs/x"},
			{"/abs/x", nil, "MISS", "n=6 abs :///abs/x"},
			{"/abs/x", []string{"X-Test-Https", "1", procHeader, "1"}, "HIT", "n=5 abs https://secure.example/abs/x"},
		}
		for _, st := range steps {
			b.get(t, st.path, st.hdr...).check(t, 200, st.xcache, st.body)
		}
	}, redistest.Redis8, redistest.Cluster)
}

// TestSecurity_nonCanonicalResponseHeaders: response header names in
// any letter case, set straight in the map (net/http sends them as
// written), are seen by every storage rule and every header drop
// (issue 10, 3).
func TestSecurity_nonCanonicalResponseHeaders(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	notStored := []struct {
		name string
		hdr  http.Header
	}{
		{"set-cookie", http.Header{"Cache-Control": {"public, max-age=60"}, "set-cookie": {"session=secret"}}},
		{"SET-COOKIE", http.Header{"SET-COOKIE": {"session=secret"}}},
		{"cache-control private", http.Header{"cache-control": {"private"}}},
		{"cache-control no-store", http.Header{"cache-control": {"private, no-store"}}},
		{"both cases", http.Header{"Cache-Control": {"max-age=60"}, "cache-control": {"no-store"}}},
		{"vary star", http.Header{"vary": {"*"}}},
		{"expires", http.Header{"expires": {"0"}}},
		{"pragma", http.Header{"pragma": {"no-cache"}}},
	}
	for _, tt := range notStored {
		t.Run(tt.name, func(t *testing.T) {
			var renders atomic.Int32
			b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for k, vs := range tt.hdr {
					w.Header()[k] = vs
				}
				fmt.Fprintf(w, "n=%d for %s", renders.Add(1), r.Header.Get("X-User"))
			}), &bedOptions{procs: 2})
			b.get(t, "/nc", "X-User", "alice").check(t, 200, "BYPASS", "n=1 for alice")
			b.get(t, "/nc", "X-User", "bob", procHeader, "1").check(t, 200, "BYPASS", "n=2 for bob")
			b.waitGone(t, "/nc")
		})
	}
	t.Run("vary", func(t *testing.T) {
		var renders atomic.Int32
		b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header()["vary"] = []string{"x-user"}
			fmt.Fprintf(w, "n=%d for %s", renders.Add(1), r.Header.Get("X-User"))
		}), &bedOptions{procs: 2})
		b.get(t, "/v", "X-User", "alice").check(t, 200, "MISS", "n=1 for alice")
		b.get(t, "/v", "X-User", "bob", procHeader, "1").check(t, 200, "MISS", "n=2 for bob")
		// Process 0 has learnt the Vary and looks under the variants'
		// keys, where alice's first render went too.
		b.get(t, "/v", "X-User", "bob").check(t, 200, "HIT", "n=2 for bob")
		b.get(t, "/v", "X-User", "alice").check(t, 200, "HIT", "n=1 for alice")
		b.get(t, "/v", "X-User", "alice", procHeader, "1").check(t, 200, "HIT", "n=1 for alice")
	})
	t.Run("dropped and replaced headers", func(t *testing.T) {
		var renders atomic.Int32
		b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header()["age"] = []string{"987654"}
			w.Header()["cache-control"] = []string{"max-age=9999999"} // older than its Age
			w.Header()["etag"] = []string{`"h1"`}
			w.Header()["keep-alive"] = []string{"timeout=987654"}
			fmt.Fprintf(w, "n=%d", renders.Add(1))
		}), nil)
		b.get(t, "/d").check(t, 200, "MISS", "n=1")
		b.waitStored(t, "/d", "n=1")
		hit := b.get(t, "/d")
		hit.check(t, 200, "HIT", "n=1")
		// One Age: the cache's, which counts the Age received (the
		// clock has not moved since).
		if got := hit.header.Values("Age"); len(got) != 1 || got[0] != "987654" {
			t.Errorf("Age on a hit: %q, want only the cache's, 987654", got)
		}
		if got := hit.header.Values("Etag"); len(got) != 1 || got[0] != `"h1"` {
			t.Errorf("ETag on a hit: %q, want only the handler's", got)
		}
		if raw := b.storedText(t, "/d"); strings.Contains(raw, "987654") {
			t.Errorf("the stored entry holds a dropped header: %q", raw)
		}
		b.get(t, "/d", "If-None-Match", `"h1"`).check(t, 304, "HIT", "")
	})
}

// TestSecurity_varyMarker: the marker a Vary response leaves under the
// resource's plain key (the Vary names, no body) is never served, whatever
// a process that has not learnt the Vary sends: every request gets the
// render for its own value, and the marker holds no part of any response.
func TestSecurity_varyMarker(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		var renders atomic.Int32
		b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Vary", "X-User")
			w.Header().Set("Cache-Control", "public, max-age=60")
			w.Header().Set("X-Secret", "for="+r.Header.Get("X-User"))
			fmt.Fprintf(w, "n=%d user=%q", renders.Add(1), r.Header.Get("X-User"))
		}), &bedOptions{procs: 3})

		b.get(t, "/mk", procHeader, "0", "X-User", "alice").check(t, 200, "MISS", `n=1 user="alice"`)
		b.waitStored(t, "/mk", "X-User")
		if raw := b.storedText(t, "/mk"); strings.Contains(raw, "alice") || strings.Contains(raw, "n=1") {
			t.Fatalf("the plain key holds part of a response: %q", raw)
		}
		// Processes 1 and 2 have not seen the Vary: each finds the marker
		// first. None of these requests matches alice's variant.
		steps := []struct {
			proc  string
			hdr   []string
			cache string
			body  string
		}{
			{"1", nil, "MISS", `n=2 user=""`},
			{"2", []string{"X-User", ""}, "HIT", `n=2 user=""`},
			{"2", []string{"X-User", "Alice"}, "MISS", `n=3 user="Alice"`},
			{"1", []string{"X-User", "alice "}, "HIT", `n=1 user="alice"`}, // net/http trims the value
			{"2", []string{"X-User", "alice", "X-User", "bob"}, "MISS", `n=4 user="alice"`},
			{"1", []string{"Vary", "X-User"}, "HIT", `n=2 user=""`},
		}
		for _, st := range steps {
			r := b.get(t, "/mk", append([]string{procHeader, st.proc}, st.hdr...)...)
			r.check(t, 200, st.cache, st.body)
			user := strings.TrimSuffix(strings.TrimPrefix(st.body[strings.Index(st.body, "user="):], `user="`), `"`)
			if got := r.header.Get("X-Secret"); got != "for="+user {
				t.Errorf("%v: X-Secret %q, want %q", st.hdr, got, "for="+user)
			}
		}
	}, redistest.Redis8, redistest.Cluster)
}

// TestSecurity_invalidationFromRequest: a write's invalidation reaches
// only its own host, even when the Location or Content-Location the
// handler answers with echoes the request (an open "next" redirect) or the
// client sends another Host; and a write the handler refuses invalidates
// nothing, whatever its method.
func TestSecurity_invalidationFromRequest(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	var renders atomic.Int32
	b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if r.URL.Query().Get("ok") == "" {
				w.WriteHeader(http.StatusForbidden)
				fmt.Fprintf(w, "%s %d", r.Method, renders.Add(1))
				return
			}
			next := r.URL.Query().Get("next")
			w.Header().Set("Location", next)
			w.Header().Set("Content-Location", next)
			w.WriteHeader(http.StatusSeeOther)
		}
		fmt.Fprintf(w, "%s %d host=%s", r.Method, renders.Add(1), r.Host)
	}), nil)
	victim := "victim.example"
	b.get(t, "/page", "Host", victim).check(t, 200, "MISS", "GET 1 host="+victim)
	b.get(t, "/page").check(t, 200, "MISS", "GET 2 host="+strings.TrimPrefix(b.srv.URL, "http://"))

	for _, next := range []string{
		"http://" + victim + "/page", "//" + victim + "/page", "http://" + victim + ":80/page",
		"http://VICTIM.example/page", "http://" + victim + "./page", "http://user@" + victim + "/page",
	} {
		n := renders.Load()
		b.do(t, "POST", "/login?ok=1&next="+url.QueryEscape(next)).check(t, 303, "BYPASS",
			fmt.Sprintf("POST %d host=%s", n+1, strings.TrimPrefix(b.srv.URL, "http://")))
		b.get(t, "/page", "Host", victim).check(t, 200, "HIT", "GET 1 host="+victim)
		// Nor is the page of the same path on the writer's own host.
		b.get(t, "/page").check(t, 200, "HIT", "GET 2 host="+strings.TrimPrefix(b.srv.URL, "http://"))
	}
	// A refused write, by any method and to the page itself, leaves it.
	for _, method := range []string{"POST", "DELETE", "PURGE", "PUT"} {
		n := renders.Load()
		b.do(t, method, "/page", "Host", victim).check(t, 403, "BYPASS", fmt.Sprintf("%s %d", method, n+1))
		b.get(t, "/page", "Host", victim).check(t, 200, "HIT", "GET 1 host="+victim)
	}
	// Another host's write naming the same path leaves the victim's page;
	// a write on the victim's own host naming it evicts it.
	n := renders.Load()
	b.do(t, "POST", "/page?ok=1&next=/page").check(t, 303, "BYPASS",
		fmt.Sprintf("POST %d host=%s", n+1, strings.TrimPrefix(b.srv.URL, "http://")))
	b.get(t, "/page", "Host", victim).check(t, 200, "HIT", "GET 1 host="+victim)
	b.do(t, "POST", "/page?ok=1&next=/page", "Host", victim).check(t, 303, "BYPASS", fmt.Sprintf("POST %d host=%s", n+2, victim))
	b.get(t, "/page", "Host", victim).check(t, 200, "MISS", fmt.Sprintf("GET %d host=%s", n+3, victim))
}

// TestSecurity_revalidationAndRange: per-user variants with validators,
// revalidated and answered in ranges. Whatever If-None-Match or Range a
// client sends, it gets its own variant or a part of it, a revalidation
// sends the handler the stored variant's own ETag (never the client's),
// and a 304 answers only the client whose variant it matched.
func TestSecurity_revalidationAndRange(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		var renders atomic.Int32
		var mu sync.Mutex
		var conds []string // the If-None-Match of each render
		b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			renders.Add(1)
			user := r.Header.Get("X-User")
			etag := `"` + user + `-v"`
			mu.Lock()
			conds = append(conds, r.Header.Get("If-None-Match"))
			mu.Unlock()
			w.Header().Set("Vary", "X-User")
			w.Header().Set("Cache-Control", "max-age=10")
			w.Header().Set("ETag", etag)
			if r.Header.Get("If-None-Match") == etag {
				w.WriteHeader(http.StatusNotModified)
				return
			}
			fmt.Fprintf(w, "secret of %-8s", user)
		}), &bedOptions{procs: 2})
		lastCond := func() string {
			mu.Lock()
			defer mu.Unlock()
			return conds[len(conds)-1]
		}
		b.get(t, "/r", procHeader, "0", "X-User", "alice").check(t, 200, "MISS", "secret of alice   ")
		b.get(t, "/r", procHeader, "0", "X-User", "bob").check(t, 200, "MISS", "secret of bob     ")
		b.waitStored(t, "/r", "X-User")

		// Another user's ETag as a condition: mallory's own render, whole.
		r := b.get(t, "/r", procHeader, "1", "X-User", "mallory", "If-None-Match", `"alice-v"`)
		r.check(t, 200, "MISS", "secret of mallory ")
		if got := lastCond(); got != "" {
			t.Errorf("a render for the cache got the client's If-None-Match %q", got)
		}
		// Ranges come from the client's own variant only.
		r = b.get(t, "/r", procHeader, "1", "X-User", "bob", "Range", "bytes=10-12")
		r.check(t, 206, "HIT", "bob")
		r = b.get(t, "/r", procHeader, "1", "X-User", "bob", "Range", "bytes=0-", "If-None-Match", `"alice-v"`)
		r.check(t, 206, "HIT", "secret of bob     ")
		r = b.get(t, "/r", procHeader, "0", "X-User", "alice", "If-None-Match", `"bob-v"`)
		r.check(t, 200, "HIT", "secret of alice   ")

		// Stale: each revalidation sends the stored variant's own ETag.
		b.clock.Advance(11 * time.Second)
		n := renders.Load()
		r = b.get(t, "/r", procHeader, "1", "X-User", "bob", "If-None-Match", `"alice-v"`)
		if r.status != 200 || r.body != "secret of bob     " {
			t.Errorf("bob after a revalidation: %v", r)
		}
		if got := lastCond(); renders.Load() != n+1 || got != `"bob-v"` {
			t.Errorf("renders %d (want %d), If-None-Match %q (want bob's stored ETag)", renders.Load(), n+1, got)
		}
		r = b.get(t, "/r", procHeader, "0", "X-User", "alice", "If-None-Match", `"alice-v"`)
		if r.status != http.StatusNotModified || r.body != "" {
			t.Errorf("alice's own ETag after her variant's revalidation: %v, want 304", r)
		}
		if got := lastCond(); got != `"alice-v"` {
			t.Errorf("alice's revalidation sent If-None-Match %q", got)
		}
	}, redistest.Redis8, redistest.Cluster)
}

// TestSecurity_variantsFilled: however many variants of a URL clients
// make (20 junk Accept-Language values here, more than any fixed number
// of registrations), a write's invalidation reaches the real ones, in
// every process: the writer reads its new page. Before, 16 junk variants
// filled the URL's registration slots and the real variant, never
// registered, was served from before the write (HIT) until it expired.
func TestSecurity_variantsFilled(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	var renders atomic.Int32
	b := newTestBed(t, s, invalidationHandler(&renders), &bedOptions{procs: 2})
	n := 0
	for i := range 20 {
		junk := fmt.Sprintf("junk-%d", i)
		n++
		b.get(t, "/vary", "Accept-Language", junk).check(t, 200, "MISS", fmt.Sprintf("GET %d", n))
		// Stored: the old code had registered it by then.
		b.get(t, "/vary", "Accept-Language", junk).check(t, 200, "HIT", fmt.Sprintf("GET %d", n))
	}
	n++
	b.get(t, "/vary", "Accept-Language", "en").check(t, 200, "MISS", fmt.Sprintf("GET %d", n))
	b.get(t, "/vary", "Accept-Language", "en", procHeader, "1").check(t, 200, "HIT", fmt.Sprintf("GET %d", n))
	n++
	b.do(t, "PUT", "/vary", "Accept-Language", "en").check(t, 200, "BYPASS", fmt.Sprintf("PUT %d", n))
	n++
	b.get(t, "/vary", "Accept-Language", "en", procHeader, "1").check(t, 200, "MISS", fmt.Sprintf("GET %d", n))
	b.get(t, "/vary", "Accept-Language", "en", procHeader, "0").check(t, 200, "HIT", fmt.Sprintf("GET %d", n))
	n++
	b.get(t, "/vary", "Accept-Language", "junk-0", procHeader, "0").check(t, 200, "MISS", fmt.Sprintf("GET %d", n))
}

// rawRequest writes req (a whole HTTP/1.1 request, CRLF line ends) to the
// bed's server on a connection of its own and reads the response.
func (b *testBed) rawRequest(tb testing.TB, req string) reply {
	tb.Helper()
	conn, err := net.DialTimeout("tcp", b.srv.Listener.Addr().String(), 10*time.Second)
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(conn, req); err != nil {
		tb.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		tb.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return reply{status: res.StatusCode, header: res.Header, body: string(body)}
}

// TestSecurity_purge: purging is the application's or an authorised
// operator's, never an anonymous client's: tag fields on a client's GET
// tag and purge nothing; without Options.Purge a PURGE is one more unsafe
// method (the handler answers it, and only its 2xx invalidates its own
// URL), and tags it lists purge nothing; with it, a PURGE its Authorize
// refuses purges nothing, however its tag field lines come, soft or not;
// a client's Fastly-Soft-Purge on a GET is nothing either.
func TestSecurity_purge(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	for _, withPurge := range []bool{false, true} {
		t.Run(fmt.Sprint("Purge set: ", withPurge), func(t *testing.T) {
			th := newTagHandler(map[string]string{"/a": "all"})
			o := tagOptions()
			if withPurge {
				o.Purge = &middleware.PurgePolicy{Authorize: func(*http.Request) bool { return false }}
			}
			b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == "PURGE" {
					http.Error(w, "no such method", http.StatusMethodNotAllowed)
					return
				}
				th.ServeHTTP(w, r)
			}), &bedOptions{mw: o})
			b.get(t, "/a").check(t, 200, "MISS", "/a #1")
			b.waitStored(t, "/a", "/a #1")
			b.get(t, "/b", "Surrogate-Key", "all", "Cache-Tag", "all").check(t, 200, "MISS", "/b #1")
			b.do(t, "PURGE", "/", "Surrogate-Key", "", "Surrogate-Key", "all", "Cache-Tag", "x,all")
			b.do(t, "PURGE", "/a")
			// Soft purges, asked for as Fastly takes them, are purges too.
			b.do(t, "PURGE", "/a", "Fastly-Soft-Purge", "1")
			b.do(t, "PURGE", "/", "Fastly-Soft-Purge", "1", "Surrogate-Key", "all")
			b.get(t, "/a", "Fastly-Soft-Purge", "1").check(t, 200, "HIT", "/a #1")
			b.get(t, "/a").check(t, 200, "HIT", "/a #1")
		})
	}
}

// TestSecurity_onlyIfCached: a client's only-if-cached never makes the
// handler run (a 504 where nothing stored answers it) and never gets a
// stored response the request could not otherwise get: credentials, a
// cookie or another variant still keep it from the stored page.
func TestSecurity_onlyIfCached(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	var renders atomic.Int32
	b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		renders.Add(1)
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("Vary", "X-User")
		fmt.Fprintf(w, "for %s", r.Header.Get("X-User"))
	}), nil)
	const oic = "only-if-cached"
	b.get(t, "/p", "X-User", "alice").check(t, 200, "MISS", "for alice") // answered once stored
	for _, tc := range []struct {
		name   string
		hdr    []string
		status int
		x      string
		body   string
	}{
		{"the stored variant", []string{"X-User", "alice", "Cache-Control", oic}, 200, "HIT", "for alice"},
		{"another variant", []string{"X-User", "bob", "Cache-Control", oic}, http.StatusGatewayTimeout, "MISS", ""},
		{"with credentials", []string{"X-User", "alice", "Authorization", "Bearer x", "Cache-Control", oic}, http.StatusGatewayTimeout, "BYPASS", ""},
		{"with a cookie", []string{"X-User", "alice", "Cookie", "s=1", "Cache-Control", oic}, http.StatusGatewayTimeout, "BYPASS", ""},
		{"on a second line", []string{"X-User", "bob", "Cache-Control", "max-age=0", "Cache-Control", oic}, http.StatusGatewayTimeout, "MISS", ""},
		{"with no-cache", []string{"X-User", "carol", "Cache-Control", "no-cache, " + oic}, http.StatusGatewayTimeout, "MISS", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := b.get(t, "/p", tc.hdr...)
			r.check(t, tc.status, tc.x, tc.body)
			if r.status == http.StatusGatewayTimeout && r.header.Get("Cache-Status") != "" {
				t.Errorf("Cache-Status %q on the cache's own 504", r.header.Get("Cache-Status"))
			}
		})
	}
	if n := renders.Load(); n != 1 {
		t.Errorf("%d renders, want 1: only-if-cached never reaches the handler", n)
	}
}
