package middleware_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/redistest"
	"github.com/hotkv/stampede/middleware"
)

// Regression tests for a hostile review of the issue 10 fixes: each sends
// a request an attacker could use to make the cache store a response for
// other requests than the one it was rendered for (or, for the deadline
// and chi tests, shows what the render took from the wrong context).

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

// multipartBody is a multipart/form-data body with one field, and its
// Content-Type.
func multipartBody(name, value string) (*bytes.Buffer, string) {
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	_ = mw.WriteField(name, value)
	_ = mw.Close()
	return &body, mw.FormDataContentType()
}

// TestMiddleware_opaqueTargetBypasses: a request target in the absolute
// form without "//" ("http:anything") is parsed by net/http into
// URL.Opaque, and user information into URL.User; the key had neither,
// so every such target had the key of "GET http://<host>" and the page
// rendered for one was served for all the others. Such requests bypass
// the cache now.
func TestMiddleware_opaqueTargetBypasses(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	var renders atomic.Int32
	b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "render %d of opaque=%s user=%s uri=%s", renders.Add(1), r.URL.Opaque, r.URL.User, r.RequestURI)
	}), nil)
	for _, tt := range []struct{ first, then, want string }{
		{"http:first-resource", "http:other-resource", "opaque=other-resource"},
		{"http://alice@example.com/u", "http://bob@example.com/u", "user=bob"},
	} {
		first := b.rawRequest(t, "GET "+tt.first+" HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n")
		if first.status != 200 {
			t.Fatalf("GET %s: %v", tt.first, first)
		}
		then := b.rawRequest(t, "GET "+tt.then+" HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n")
		if !strings.Contains(then.body, tt.want) {
			t.Errorf("GET %s was answered with the page of GET %s: %v", tt.then, tt.first, then)
		}
	}
}

// TestMiddleware_bracketedHostKeyedApart: keyHost stripped a default port
// with net.SplitHostPort, which also strips square brackets, so
// "Host: [example.com]:80" had the key of "Host: example.com" while the
// handler saw r.Host "[example.com]:80". A page that builds its links or
// asset URLs from r.Host (as most do) was stored with
// "//[example.com]:80/…", which no browser loads, and served to every
// visitor of example.com. A bracketed host is keyed as the handler sees
// it (but lower case): IPv6 literals keep working, "[::1]:80" and
// "[::1]" with entries of their own.
func TestMiddleware_bracketedHostKeyedApart(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	var renders atomic.Int32
	b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `render %d <script src="//%s/app.js"></script>`, renders.Add(1), r.Host)
	}), nil)
	attack := b.get(t, "/", "Host", "[example.com]:80")
	if attack.cache() != "MISS" {
		t.Fatalf("attack: %v, want MISS", attack)
	}
	victim := b.get(t, "/", "Host", "example.com")
	if strings.Contains(victim.body, "[example.com]") {
		t.Errorf("a visitor of example.com was served the page rendered for Host [example.com]:80: %v", victim)
	}

	b.get(t, "/", "Host", "[EXAMPLE.com]:80").check(t, 200, "HIT", attack.body)

	b.get(t, "/v6", "Host", "[::1]:80").check(t, 200, "MISS", `render 3 <script src="//[::1]:80/app.js"></script>`)
	b.get(t, "/v6", "Host", "[::1]:80").check(t, 200, "HIT", `render 3 <script src="//[::1]:80/app.js"></script>`)
	b.get(t, "/v6", "Host", "[::1]").check(t, 200, "MISS", `render 4 <script src="//[::1]/app.js"></script>`)
	b.get(t, "/v6", "Host", "[::1]:8080").check(t, 200, "MISS", `render 5 <script src="//[::1]:8080/app.js"></script>`)
}

// TestMiddleware_getBodyNeverRendered: a GET's body is no part of the key,
// but it reached the handler rendering for the cache. r.FormValue, the
// usual way a Go handler reads a parameter, parses a multipart body on any
// method, GET included, so a parameter sent in the body of a GET was
// rendered, stored under the key of the plain URL and served to everyone
// (the same defect as issue 10 #1, through the body instead of the
// query). A GET or HEAD with a body now bypasses the cache: its own
// handler sees its body, nobody else shares the response.
func TestMiddleware_getBodyNeverRendered(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	var renders atomic.Int32
	b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "render %d: results for %q", renders.Add(1), r.FormValue("q"))
	}), nil)

	body, contentType := multipartBody("q", "<script>alert(document.cookie)</script>")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.srv.URL+"/search", body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	res, err := b.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	attack, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(attack), "<script>") {
		t.Fatalf("the handler of a GET with a body did not see its own body: %s %q", res.Header.Get("X-Cache"), attack)
	}

	victim := b.get(t, "/search")
	if strings.Contains(victim.body, "<script>") {
		t.Errorf("a plain GET /search was served the page rendered from another request's body: %v", victim)
	}
}

// TestMiddleware_getBodyWithoutLengthNeverRendered: a request that gets
// past the bypass with a body anyway (here an outer middleware replaced
// the body and left ContentLength 0, or parsed the form before the cache)
// still reaches the render for the cache without body, body headers or
// parsed form.
func TestMiddleware_getBodyWithoutLengthNeverRendered(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	for _, parse := range []bool{false, true} {
		t.Run(fmt.Sprintf("parsed=%v", parse), func(t *testing.T) {
			var renders atomic.Int32
			b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprintf(w, "render %d: results for %q type %q", renders.Add(1), r.FormValue("q"), r.Header.Get("Content-Type"))
			}), &bedOptions{wrap: func(h http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.ContentLength > 0 {
						buf, _ := io.ReadAll(r.Body)
						r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(buf)), 0
						if parse {
							_ = r.ParseMultipartForm(1 << 20)
						}
					}
					h.ServeHTTP(w, r)
				})
			}})
			body, contentType := multipartBody("q", "<script>x</script>")
			req, err := http.NewRequest(http.MethodGet, b.srv.URL+"/search", body)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", contentType)
			res, err := b.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()

			victim := b.get(t, "/search")
			if strings.Contains(victim.body, "<script>") || strings.Contains(victim.body, "multipart") {
				t.Errorf("a plain GET /search was served the page rendered from another request's body: %v", victim)
			}
		})
	}
}

// TestMiddleware_ignoredParamInGetBodyNeverStored: with IgnoreQuery, the
// ignored parameter was removed from the query of the render, but
// r.FormValue still found it in a multipart GET body, and the page was
// stored under the key of the URL without it.
func TestMiddleware_ignoredParamInGetBodyNeverStored(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	var renders atomic.Int32
	b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "render %d: campaign %q", renders.Add(1), r.FormValue("utm_source"))
	}), &bedOptions{mw: &middleware.Options{IgnoreQuery: []string{"utm_source"}}})

	body, contentType := multipartBody("utm_source", "<img src=x onerror=alert(1)>")
	req, err := http.NewRequest(http.MethodGet, b.srv.URL+"/landing", body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	res, err := b.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()

	victim := b.get(t, "/landing")
	if strings.Contains(victim.body, "onerror") {
		t.Errorf("GET /landing was served the render of an ignored parameter sent in a GET body: %v", victim)
	}
}

// TestMiddleware_chiRoutePatternOnMiss: since d31cf5c the render a
// request did itself (a MISS) ran on the load's context, whose chi
// routing context is a copy taken before routing. With the middleware in
// a chi router's r.Use, chi then routed on that copy, and the request's
// own routing context, which outer middlewares read after next returns
// (the usual way to label metrics and logs by route pattern), was left
// without the route: every MISS was labelled "". The render in the
// request's goroutine uses the request's own context values again.
func TestMiddleware_chiRoutePatternOnMiss(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	patterns := make(chan string, 4)
	metrics := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			next.ServeHTTP(w, r)
			patterns <- chi.RouteContext(r.Context()).RoutePattern()
		})
	}
	b := newTestBed(t, s, nil, &bedOptions{router: func(m *middleware.Middleware, _ *cache.Cache) http.Handler {
		r := chi.NewRouter()
		r.Use(metrics, m.Handler)
		r.Get("/items/{id}", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "item %s", chi.URLParam(r, "id"))
		})
		return r
	}})
	b.get(t, "/items/1").check(t, 200, "MISS", "item 1")
	if p := <-patterns; p != "/items/{id}" {
		t.Errorf("an outer middleware saw route pattern %q for a MISS, want /items/{id}", p)
	}
	b.get(t, "/items/1").check(t, 200, "HIT", "item 1")
	<-patterns // a HIT is not routed past the middleware: nothing to check
}

// TestMiddleware_renderKeepsRequestDeadline: the render a request did for
// the cache ran on context.WithoutCancel of the load's context, so it
// carried no deadline at all, and an application's own request deadline
// (chi's middleware.Timeout, http.TimeoutHandler, a WithTimeout set by an
// outer middleware) no longer bounded it: its end counted as "the client
// went" and the render ran on to LoadTimeout. Here the application gives
// each request 200ms; the render was cut only by LoadTimeout (3s), and
// the handler, which budgets its work by ctx.Deadline, saw none. Only a
// client that goes away (a cancellation before the deadline) is ignored
// now; the render has the request's deadline and ends at it, and what it
// wrote is not stored.
func TestMiddleware_renderKeepsRequestDeadline(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	type seen struct {
		deadline bool
		took     time.Duration
	}
	out := make(chan seen, 2)
	var renders atomic.Int32
	b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := renders.Add(1)
		start := time.Now()
		_, ok := r.Context().Deadline()
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
		out <- seen{ok, time.Since(start)}
		fmt.Fprintf(w, "done %d", n)
	}), &bedOptions{
		cache: &cache.Options{LoadTimeout: 3 * time.Second},
		wrap: func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ctx, cancel := context.WithTimeout(r.Context(), 200*time.Millisecond)
				defer cancel()
				h.ServeHTTP(w, r.WithContext(ctx))
			})
		},
	})
	_ = b.get(t, "/slow")
	got := <-out
	if !got.deadline {
		t.Errorf("the handler rendering for the cache sees no deadline on its context")
	}
	if got.took > time.Second {
		t.Errorf("the render ran %v although the application's deadline for the request was 200ms", got.took)
	}
	// Cut by its deadline, the render was no answer for anyone else.
	if r := b.get(t, "/slow"); r.cache() == "HIT" {
		t.Errorf("the render cut by the request's deadline was stored: %v", r)
	}
}

// TestMiddleware_trailersNotStored: a handler that sent a cookie as a
// trailer (w.Header()["Trailer:Set-Cookie"], net/http's
// http.TrailerPrefix) had its response stored: canonicalHeader leaves the
// name alone (':' is not a token byte) and storable looked for
// "Set-Cookie" only. The stored field was replayed to everyone; over
// HTTP/2 net/http sends it as a Set-Cookie trailer (Set-Cookie is not
// among the trailers it refuses). Responses that declare (Trailer) or set
// trailers are not stored.
func TestMiddleware_trailersNotStored(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	for name, handle := range map[string]func(w http.ResponseWriter, n int32){
		"prefix": func(w http.ResponseWriter, n int32) {
			w.Header()[http.TrailerPrefix+"Set-Cookie"] = []string{fmt.Sprintf("session=user-%d", n)}
			fmt.Fprintf(w, "render %d", n)
		},
		"prefix in lower case": func(w http.ResponseWriter, n int32) {
			w.Header()["trailer:set-cookie"] = []string{fmt.Sprintf("session=user-%d", n)}
			fmt.Fprintf(w, "render %d", n)
		},
		"declared": func(w http.ResponseWriter, n int32) {
			w.Header().Set("Trailer", "X-User")
			fmt.Fprintf(w, "render %d", n)
			w.Header().Set("X-User", fmt.Sprintf("user-%d", n)) // after the body: a trailer
		},
	} {
		t.Run(name, func(t *testing.T) {
			var renders atomic.Int32
			b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				handle(w, renders.Add(1))
			}), nil)
			b.get(t, "/me")
			if then := b.get(t, "/me"); then.cache() == "HIT" {
				t.Errorf("a response with trailers was stored and served: %v", then)
			}
		})
	}
}
