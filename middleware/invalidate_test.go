package middleware_test

import (
	"crypto/tls"
	"fmt"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/redisx"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/middleware"
)

// invalidationHandler renders "<method> <n>" with Cache-Control max-age,
// Vary: Accept-Language on /vary, and, for tests, the status and
// Location / Content-Location the request asks for in X-Test-* headers.
func invalidationHandler(renders *atomic.Int32) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		if r.URL.Path == "/vary" {
			w.Header().Set("Vary", "Accept-Language")
		}
		for _, name := range []string{"Location", "Content-Location"} {
			if v := r.Header.Get("X-Test-" + name); v != "" {
				w.Header().Set(name, v)
			}
		}
		status := http.StatusOK
		if v := r.Header.Get("X-Test-Status"); v != "" {
			status, _ = strconv.Atoi(v)
		}
		w.WriteHeader(status)
		fmt.Fprintf(w, "%s %d", r.Method, renders.Add(1))
	})
}

// TestMiddleware_invalidation: a successful (2xx, 3xx) response to a
// request with a method not known to be safe deletes the stored GET of
// its URL, and of its Location and Content-Location on the same host, in
// every process and with every Vary variant, before the client gets it;
// a failed one, another host's URL, or NoInvalidation leave them. Before,
// the stale page was served until it expired.
func TestMiddleware_invalidation(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	t.Run("methods", func(t *testing.T) {
		var renders atomic.Int32
		b := newTestBed(t, s, invalidationHandler(&renders), &bedOptions{procs: 2})
		for _, method := range []string{"POST", "PUT", "DELETE", "PATCH", "M-SEARCH", "PROPPATCH"} {
			n := renders.Load()
			path, other := "/i?m="+method, "/i?other="+method
			b.get(t, path, procHeader, "0").check(t, 200, "MISS", fmt.Sprintf("GET %d", n+1))
			b.waitStored(t, path, fmt.Sprintf("GET %d", n+1))
			b.get(t, path, procHeader, "1").check(t, 200, "HIT", fmt.Sprintf("GET %d", n+1))
			b.get(t, other, procHeader, "1").check(t, 200, "MISS", fmt.Sprintf("GET %d", n+2))
			b.do(t, method, path, procHeader, "1").check(t, 200, "BYPASS", fmt.Sprintf("%s %d", method, n+3))
			if b.stored(t, path) {
				t.Errorf("%s: the entry is still stored", method)
			}
			b.get(t, other, procHeader, "0").check(t, 200, "HIT", fmt.Sprintf("GET %d", n+2))
			b.get(t, path, procHeader, "0").check(t, 200, "MISS", fmt.Sprintf("GET %d", n+4))
		}
	})
	t.Run("failed or safe", func(t *testing.T) {
		var renders atomic.Int32
		b := newTestBed(t, s, invalidationHandler(&renders), nil)
		b.get(t, "/f").check(t, 200, "MISS", "GET 1")
		b.waitStored(t, "/f", "GET 1")
		for _, tt := range []struct{ method, status string }{
			{"POST", "404"}, {"PUT", "500"}, {"DELETE", "403"}, {"OPTIONS", "200"}, {"TRACE", "200"},
		} {
			b.do(t, tt.method, "/f", "X-Test-Status", tt.status)
			b.get(t, "/f").check(t, 200, "HIT", "GET 1")
		}
	})
	t.Run("Location and Content-Location", func(t *testing.T) {
		var renders atomic.Int32
		b := newTestBed(t, s, invalidationHandler(&renders), nil)
		for i, path := range []string{"/items/1", "/items/2", "/items/3", "/items/4"} {
			b.get(t, path).check(t, 200, "MISS", fmt.Sprintf("GET %d", i+1))
			b.waitStored(t, path, fmt.Sprintf("GET %d", i+1))
		}
		// Another host's entry for the same path, which must stay.
		b.get(t, "/items/1", "Host", "other.example").check(t, 200, "MISS", "GET 5")
		b.get(t, "/items/1", "Host", "other.example").check(t, 200, "HIT", "GET 5")
		b.do(t, "POST", "/items", "X-Test-Status", "201", "X-Test-Location", "/items/1",
			"X-Test-Content-Location", b.srv.URL+"/items/2").check(t, 201, "BYPASS", "POST 6")
		b.do(t, "POST", "/items", "X-Test-Status", "303", "X-Test-Location", "http://other.example/items/3",
			"X-Test-Content-Location", "//other.example/items/4").check(t, 303, "BYPASS", "POST 7")
		b.do(t, "POST", "/items", "X-Test-Location", "http://other.example/items/1").check(t, 200, "BYPASS", "POST 8")
		b.get(t, "/items/1").check(t, 200, "MISS", "GET 9")
		b.get(t, "/items/2").check(t, 200, "MISS", "GET 10")
		b.get(t, "/items/3").check(t, 200, "HIT", "GET 3")
		b.get(t, "/items/4").check(t, 200, "HIT", "GET 4")
		b.get(t, "/items/1", "Host", "other.example").check(t, 200, "HIT", "GET 5")
	})
	t.Run("Vary variants", func(t *testing.T) {
		var renders atomic.Int32
		b := newTestBed(t, s, invalidationHandler(&renders), &bedOptions{procs: 2})
		langs := []string{"en", "de", "fr"}
		for i, lang := range langs {
			b.get(t, "/vary", "Accept-Language", lang).check(t, 200, "MISS", fmt.Sprintf("GET %d", i+1))
			b.get(t, "/vary", "Accept-Language", lang, procHeader, "1").check(t, 200, "HIT", fmt.Sprintf("GET %d", i+1))
		}
		b.do(t, "PUT", "/vary", "Accept-Language", "it").check(t, 200, "BYPASS", "PUT 4")
		for i, lang := range langs {
			if b.stored(t, "/vary", "\nvary Accept-Language: "+lang) {
				t.Errorf("variant %s is still stored", lang)
			}
			b.get(t, "/vary", "Accept-Language", lang, procHeader, strconv.Itoa(i%2)).check(t, 200, "MISS", fmt.Sprintf("GET %d", i+5))
		}
	})
	t.Run("NoInvalidation", func(t *testing.T) {
		var renders atomic.Int32
		b := newTestBed(t, s, invalidationHandler(&renders), &bedOptions{mw: &middleware.Options{NoInvalidation: true}})
		b.get(t, "/n").check(t, 200, "MISS", "GET 1")
		b.waitStored(t, "/n", "GET 1")
		b.do(t, "POST", "/n").check(t, 200, "BYPASS", "POST 2")
		b.get(t, "/n").check(t, 200, "HIT", "GET 1")
	})
}

// TestMiddleware_invalidationRelative: a relative Location or
// Content-Location is resolved against the URL the client asked for (RFC
// 9110 10.2.2, 8.7), as the client resolves it. Before, it was resolved
// against "/": "POST /items/" answered "Location: 42" evicted /42 and
// left /items/42.
func TestMiddleware_invalidationRelative(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	var renders atomic.Int32
	b := newTestBed(t, s, invalidationHandler(&renders), nil)
	paths := []string{"/items/42", "/42", "/items/b", "/b", "/items?x=2", "/?x=2"}
	for _, path := range paths {
		r := b.get(t, path)
		b.waitStored(t, path, r.body)
	}
	b.do(t, "POST", "/items/", "X-Test-Status", "201", "X-Test-Location", "42").check(t, 201, "BYPASS", "POST 7")
	b.do(t, "PUT", "/items/a/", "X-Test-Content-Location", "../b").check(t, 200, "BYPASS", "PUT 8")
	b.do(t, "POST", "/items?x=1", "X-Test-Status", "303", "X-Test-Location", "?x=2").check(t, 303, "BYPASS", "POST 9")
	for i, path := range paths {
		evicted := i%2 == 0 // the first of each pair is the resolved URL
		if got := b.stored(t, path); got == evicted {
			t.Errorf("%s: stored = %v, want %v", path, got, !evicted)
		}
	}
}

// TestMiddleware_invalidationScheme: a Location or Content-Location
// evicts only on the request's own origin: scheme, host and port (RFC
// 9111 4.4). Before, an http POST answered with "Location:
// https://same-host/p" evicted the https entry for /p (and an https one
// the http entry), since only host and port were compared.
func TestMiddleware_invalidationScheme(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	var renders atomic.Int32
	b := newTestBed(t, s, invalidationHandler(&renders), &bedOptions{wrap: func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Test-Tls") != "" {
				r.TLS = &tls.ConnectionState{} // as if it came over TLS
			}
			h.ServeHTTP(w, r)
		})
	}})
	host := strings.TrimPrefix(b.srv.URL, "http://")
	httpsStored := func() bool {
		n, err := b.rc.Exists(t.Context(), b.ns+":{"+redisx.Tag("GET https://"+host+"/p")+"}").Result()
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	b.get(t, "/p", "X-Test-Tls", "1").check(t, 200, "MISS", "GET 1")
	redistest.WaitFor(t, testContext(t, 10*time.Second), "the https entry", httpsStored)
	b.get(t, "/p").check(t, 200, "MISS", "GET 2")
	b.waitStored(t, "/p", "GET 2")

	b.do(t, "POST", "/q", "X-Test-Location", "https://"+host+"/p").check(t, 200, "BYPASS", "POST 3")
	b.do(t, "POST", "/q", "X-Test-Tls", "1", "X-Test-Content-Location", "http://"+host+"/p").check(t, 200, "BYPASS", "POST 4")
	if !httpsStored() || !b.stored(t, "/p") {
		t.Errorf("another scheme's write evicted an entry: https stored %v, http stored %v", httpsStored(), b.stored(t, "/p"))
	}
	b.get(t, "/p", "X-Test-Tls", "1").check(t, 200, "HIT", "GET 1")
	b.get(t, "/p").check(t, 200, "HIT", "GET 2")

	// The request's own scheme still evicts.
	b.do(t, "POST", "/q", "X-Test-Tls", "1", "X-Test-Location", "https://"+host+"/p").check(t, 200, "BYPASS", "POST 5")
	if httpsStored() {
		t.Error("an https write left the https entry of its Location")
	}
}

// TestMiddleware_hitReads: what a hit costs the server, counted by the
// server itself (INFO commandstats, on a server of the test's own): a hit
// of a resource without Vary is one read, as it was before generations;
// a hit of a Vary variant is two reads, the variant and its URL's marker
// (sent at once, see find), and no write. Connection handshakes are not
// counted (a pool may dial when two reads go at once; once, not per hit).
func TestMiddleware_hitReads(t *testing.T) {
	s := redistest.Start(t, redistest.Redis8)
	var renders atomic.Int32
	b := newTestBed(t, s, invalidationHandler(&renders), nil)
	ctx := testContext(t, 10*time.Second)
	commands := func() map[string]int {
		t.Helper()
		info, err := b.rc.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		calls := map[string]int{}
		for _, line := range strings.Split(info, "\n") {
			name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
			switch {
			case !ok || name == line || name == "info":
				continue
			case name == "hello" || name == "client|setinfo" || name == "auth" || name == "select":
				// A connection's handshake: the pool dials a second
				// connection when two reads go at once, once, not per hit.
				continue
			}
			var n int
			if _, err := fmt.Sscanf(rest, "calls=%d", &n); err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			calls[name] = n
		}
		return calls
	}
	for _, tc := range []struct {
		name, path, body string
		announced        int // announcements published by then, this case's miss included
		want             map[string]int
	}{
		{"no Vary", "/plain", "GET 1", 2, map[string]int{"get": 1}},
		{"Vary", "/vary", "GET 2", 4, map[string]int{"get": 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b.get(t, tc.path, "Accept-Language", "en").check(t, 200, "MISS", tc.body)
			b.get(t, tc.path, "Accept-Language", "en").check(t, 200, "HIT", tc.body)
			// The miss's writes are announced after they are stored, so
			// an announcement can trail the hits that read them: wait for
			// all of them (counted since the server started) before
			// counting what one hit sends.
			redistest.WaitFor(t, ctx, "the miss's announcements", func() bool { return commands()["spublish"] >= tc.announced })
			before := commands()
			b.get(t, tc.path, "Accept-Language", "en").check(t, 200, "HIT", tc.body)
			after := commands()
			got := map[string]int{}
			for name, n := range after {
				if d := n - before[name]; d != 0 {
					got[name] = d
				}
			}
			if !maps.Equal(got, tc.want) {
				t.Errorf("a hit sent %v to the server, want %v", got, tc.want)
			}
		})
	}
}
