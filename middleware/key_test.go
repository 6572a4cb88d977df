package middleware_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/middleware"
)

// rawGet sends a request line as given (no client-side escaping) and
// returns the response.
func rawGet(tb testing.TB, addr, target string) reply {
	tb.Helper()
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", target, addr); err != nil {
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

func TestMiddleware_oddURLs(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		var renders atomic.Int32
		b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "r%d %d", renders.Add(1), len(r.URL.RequestURI()))
		}), nil)
		addr := b.srv.Listener.Addr().String()
		body := func(n, uriLen int) string { return fmt.Sprintf("r%d %d", n, uriLen) }
		n := 0
		next := func() int { n++; return n }

		t.Run("10 KB path", func(t *testing.T) {
			path := "/" + strings.Repeat("abcdefghij", 1024)
			k := next()
			b.get(t, path).check(t, 200, "MISS", body(k, len(path)))
			b.get(t, path).check(t, 200, "HIT", body(k, len(path)))
			b.get(t, path+"x").check(t, 200, "MISS", body(next(), len(path)+1))
		})
		t.Run("thousands of query parameters", func(t *testing.T) {
			var q, rq []string
			for i := range 2000 {
				q = append(q, fmt.Sprintf("p%d=%d", i, i))
			}
			for i := len(q) - 1; i >= 0; i-- {
				rq = append(rq, q[i])
			}
			path := "/q?" + strings.Join(q, "&")
			k := next()
			b.get(t, path).check(t, 200, "MISS", body(k, len(path)))
			b.get(t, "/q?"+strings.Join(rq, "&")).check(t, 200, "HIT", body(k, len(path)))
		})
		t.Run("bad escapes in the query bypass", func(t *testing.T) {
			for _, path := range []string{"/e?a=%zz", "/e?%", "/e?a=1&b=%2", "/e?a=1;b=2"} {
				b.get(t, path).check(t, 200, "BYPASS", body(next(), len(path)))
				b.get(t, path).check(t, 200, "BYPASS", body(next(), len(path)))
			}
		})
		t.Run("bad escapes in the path", func(t *testing.T) {
			before := renders.Load()
			r := rawGet(t, addr, "/a%zzb")
			if r.status != http.StatusBadRequest || renders.Load() != before {
				t.Errorf("got %v with %d renders; want net/http's 400", r, renders.Load()-before)
			}
		})
		t.Run("unicode", func(t *testing.T) {
			escaped := "/caf%C3%A9/%E6%97%A5%E6%9C%AC?q=%E2%9C%93"
			k := next()
			b.get(t, escaped).check(t, 200, "MISS", body(k, len(escaped)))
			// Escaped or not, by the client or not at all: one entry.
			b.get(t, "/café/日本?q=✓").check(t, 200, "HIT", body(k, len(escaped)))
			for _, target := range []string{"/café/日本?q=%E2%9C%93", "/café/日本?q=✓", "/café/日本?q=%e2%9c%93"} {
				r := rawGet(t, addr, target)
				if r.status != 200 || r.cache() != "HIT" || r.body != body(k, len(escaped)) {
					t.Errorf("raw request line %s: %v, want a HIT of %q", target, r, body(k, len(escaped)))
				}
			}
			// The path is keyed as sent when its escaping is valid, so
			// lower-case escapes make another entry (a render more, but
			// rendered for that very URL).
			lower := "/caf%c3%a9/%e6%97%a5%e6%9c%ac?q=%E2%9C%93"
			if r := rawGet(t, addr, lower); r.status != 200 || r.cache() != "MISS" || r.body != body(next(), len(lower)) {
				t.Errorf("raw request line %s: %v", lower, r)
			}
			// Case matters in paths, also beyond ASCII.
			upper := "/CAF%C3%89/%E6%97%A5%E6%9C%AC?q=%E2%9C%93"
			b.get(t, upper).check(t, 200, "MISS", body(next(), len(upper)))
		})
		t.Run("odd but valid", func(t *testing.T) {
			for _, path := range []string{"/a//b", "/a/./b", "/%2e%2e/x", "/a?", "/a?=", "/a?&&&", "/a?x", "/~!$&'()*+,;=:@"} {
				r := b.get(t, path)
				if r.status != 200 || (r.cache() != "MISS" && r.cache() != "HIT") {
					t.Errorf("%s: %v", path, r)
				}
				again := b.get(t, path)
				again.check(t, 200, "HIT", r.body)
			}
		})
		t.Run("odd hosts", func(t *testing.T) {
			for _, host := range []string{"[::1]:80", "[::1]", "EXAMPLE.com.", "example.com:", "xn--caf-dma.example"} {
				r := b.get(t, "/h", "Host", host)
				if r.status != 200 || r.cache() != "MISS" {
					t.Errorf("Host %s: %v", host, r)
				}
				b.get(t, "/h", "Host", host).check(t, 200, "HIT", r.body)
			}
		})
	}, redistest.Redis8, redistest.Cluster)
}

// echoQuery renders what the handler sees of the query, every way it can
// look at it.
func echoQuery(renders *atomic.Int32) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "n=%d raw=%s uri=%s utm=%s", renders.Add(1), r.URL.RawQuery, r.RequestURI, r.FormValue("utm_source"))
	})
}

// TestMiddleware_ignoredQueryNotRendered: a parameter left out of the key
// is removed from the request the handler renders for the cache, so what
// one client put there cannot be stored for everybody (issue 10, 1).
func TestMiddleware_ignoredQueryNotRendered(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	var renders atomic.Int32
	b := newTestBed(t, s, echoQuery(&renders), &bedOptions{procs: 2,
		mw: &middleware.Options{Keys: middleware.KeyPolicy{IgnoreQuery: []string{"utm_source"}}}})
	b.get(t, "/landing?utm_source=%3Cscript%3Eevil%3C%2Fscript%3E&id=1").
		check(t, 200, "MISS", "n=1 raw=id=1 uri=/landing?id=1 utm=")
	b.get(t, "/landing?id=1", procHeader, "1").check(t, 200, "HIT", "n=1 raw=id=1 uri=/landing?id=1 utm=")
	b.get(t, "/landing?utm_source=a&utm_source=b").check(t, 200, "MISS", "n=2 raw= uri=/landing utm=")
	b.get(t, "/landing", procHeader, "1").check(t, 200, "HIT", "n=2 raw= uri=/landing utm=")
	// The kept parameters reach the handler as sent, in their order.
	b.get(t, "/landing?b=%7e&utm_source=x&a=1+2").check(t, 200, "MISS", "n=3 raw=b=%7e&a=1+2 uri=/landing?b=%7e&a=1+2 utm=")
	if raw := b.storedText(t, "/landing?id=1"); raw == "" || strings.Contains(raw, "evil") || strings.Contains(raw, "utm_source") {
		t.Errorf("stored entry %q", raw)
	}
	// A request that bypasses the cache is the handler's own business.
	b.get(t, "/landing?utm_source=x&id=1", "Authorization", "Bearer a").
		check(t, 200, "BYPASS", "n=4 raw=utm_source=x&id=1 uri=/landing?utm_source=x&id=1 utm=x")
}

// TestMiddleware_keyQuery: with an allow-list only the named parameters
// are keyed and passed to the handler.
func TestMiddleware_keyQuery(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	var renders atomic.Int32
	b := newTestBed(t, s, echoQuery(&renders), &bedOptions{procs: 2,
		mw: &middleware.Options{Keys: middleware.KeyPolicy{Query: []string{"id", "page"}}}})
	steps := []struct {
		path, xcache, body string
	}{
		{"/list?page=2&x=evil&id=1&utm_source=m", "MISS", "n=1 raw=page=2&id=1 uri=/list?page=2&id=1 utm="},
		{"/list?id=1&page=2", "HIT", "n=1 raw=page=2&id=1 uri=/list?page=2&id=1 utm="},
		{"/list?id=1&page=2&cachebuster=1", "HIT", "n=1 raw=page=2&id=1 uri=/list?page=2&id=1 utm="},
		{"/list?id=1", "MISS", "n=2 raw=id=1 uri=/list?id=1 utm="},
		{"/list?x=1&y=2", "MISS", "n=3 raw= uri=/list utm="},
		{"/list", "HIT", "n=3 raw= uri=/list utm="},
		{"/list?ID=1", "HIT", "n=3 raw= uri=/list utm="}, // names are case-sensitive, as in url.Values
	}
	for i, st := range steps {
		b.get(t, st.path, procHeader, strconv.Itoa(i%2)).check(t, 200, st.xcache, st.body)
	}
}

// TestMiddleware_revalidatingClientRendersOnce: the request chosen to
// render carries validators and the handler answers them; the render for
// the cache does not see them, so it is stored once for everyone and the
// middleware answers the client's condition itself (issue 10, 5).
func TestMiddleware_revalidatingClientRendersOnce(t *testing.T) {
	const waiters = 8
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testContext(t, 30*time.Second)
		g := newRenderGate(ctx, 1)
		b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := g.next()
			w.Header().Set("ETag", `"v1"`)
			for _, name := range []string{"If-None-Match", "If-Modified-Since", "If-Match", "If-Unmodified-Since", "If-Range"} {
				if r.Header.Get(name) != "" {
					w.WriteHeader(http.StatusNotModified) // what an ETag-aware handler does, simplified
					return
				}
			}
			fmt.Fprintf(w, "full body %d", n)
		}), &bedOptions{procs: 2})
		first := b.goSend(ctx, "GET", "/rv", "If-None-Match", `"v1"`, "If-Modified-Since", time.Now().UTC().Format(http.TimeFormat))
		redistest.Recv(t, ctx, g.started, "the render")
		var replies []<-chan sent
		for i := range waiters {
			replies = append(replies, b.goSend(ctx, "GET", "/rv", procHeader, strconv.Itoa(i%2)))
		}
		redistest.WaitFor(t, ctx, "the waiters", func() bool {
			st := b.stats()
			return st.Misses == waiters+1 && st.Waits == 1
		})
		g.open()
		r := redistest.Recv(t, ctx, first, "the revalidating client")
		if r.err != nil {
			t.Fatal(r.err)
		}
		r.check(t, 304, "MISS", "")
		for _, ch := range replies {
			w := redistest.Recv(t, ctx, ch, "a waiter")
			if w.err != nil {
				t.Fatal(w.err)
			}
			if w.status != 200 || w.body != "full body 1" || (w.cache() != "HIT" && w.cache() != "MISS") {
				t.Errorf("waiter got %v, want the one render's full body", w.reply)
			}
		}
		if n := g.renders.Load(); n != 1 {
			t.Errorf("renders = %d, want 1", n)
		}
	}, redistest.Redis8, redistest.Cluster)
}

// TestMiddleware_repeatedQueryParameters: the values of a repeated
// parameter keep their order in the key (issue 10, 7).
func TestMiddleware_repeatedQueryParameters(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	var renders atomic.Int32
	b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "n=%d ids=%q", renders.Add(1), r.URL.Query()["id"])
	}), &bedOptions{procs: 2})
	b.get(t, "/r?id=2&id=1").check(t, 200, "MISS", `n=1 ids=["2" "1"]`)
	b.get(t, "/r?id=1&id=2", procHeader, "1").check(t, 200, "MISS", `n=2 ids=["1" "2"]`)
	b.get(t, "/r?id=2&x=0&id=1", procHeader, "1").check(t, 200, "MISS", `n=3 ids=["2" "1"]`)
	b.get(t, "/r?x=0&id=2&id=1").check(t, 200, "HIT", `n=3 ids=["2" "1"]`) // other names move freely
	b.get(t, "/r?id=2&id=1", procHeader, "1").check(t, 200, "HIT", `n=1 ids=["2" "1"]`)
	b.get(t, "/r?id=1&id=2").check(t, 200, "HIT", `n=2 ids=["1" "2"]`)
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
	}), &bedOptions{mw: &middleware.Options{Keys: middleware.KeyPolicy{IgnoreQuery: []string{"utm_source"}}}})

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

func TestMiddleware_keyNormalisation(t *testing.T) {
	tests := []struct {
		name        string
		first, then []string // path, then header pairs
		same        bool
	}{
		{"query order", []string{"/k?a=1&b=2"}, []string{"/k?b=2&a=1"}, true},
		{"query escaping", []string{"/k?a+b=%7E"}, []string{"/k?a%20b=~"}, true},
		{"ignored parameter differs", []string{"/k?a=1&utm_source=x"}, []string{"/k?utm_source=y&a=1"}, true},
		{"ignored parameter absent", []string{"/k?a=1&utm_source=x"}, []string{"/k?a=1"}, true},
		{"other value", []string{"/k?a=1"}, []string{"/k?a=2"}, false},
		{"extra parameter", []string{"/k?a=1"}, []string{"/k?a=1&b="}, false},
		{"empty query", []string{"/k"}, []string{"/k?"}, true},
		{"path case", []string{"/K"}, []string{"/k"}, false},
		{"trailing slash", []string{"/k"}, []string{"/k/"}, false},
		{"escaped slash", []string{"/a%2Fb"}, []string{"/a/b"}, false},
		{"host case", []string{"/k", "Host", "Example.COM"}, []string{"/k", "Host", "example.com"}, true},
		{"default port", []string{"/k", "Host", "example.com:80"}, []string{"/k", "Host", "example.com"}, true},
		{"other port", []string{"/k", "Host", "example.com:8080"}, []string{"/k", "Host", "example.com"}, false},
		{"other host", []string{"/k", "Host", "a.example.com"}, []string{"/k", "Host", "b.example.com"}, false},
	}
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				var renders atomic.Int32
				b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					fmt.Fprintf(w, "render %d of %s %s", renders.Add(1), r.Host, r.URL.RequestURI())
				}), &bedOptions{mw: &middleware.Options{Keys: middleware.KeyPolicy{IgnoreQuery: []string{"utm_source"}}}})
				first := b.get(t, tt.first[0], tt.first[1:]...)
				if first.cache() != "MISS" || !strings.HasPrefix(first.body, "render 1 of ") {
					t.Fatalf("first: %v, want a MISS by render 1", first)
				}
				then := b.get(t, tt.then[0], tt.then[1:]...)
				if tt.same {
					then.check(t, 200, "HIT", first.body)
				} else if then.cache() != "MISS" || !strings.HasPrefix(then.body, "render 2 of ") {
					t.Errorf("then: %v, want a MISS by render 2", then)
				}
			})
		}
	}, redistest.Redis8, redistest.Cluster)
}
