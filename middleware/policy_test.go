package middleware_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/middleware"
)

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

func TestMiddleware_unsafeMethodsBypass(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	var renders atomic.Int32
	b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %d", r.Method, renders.Add(1))
	}), &bedOptions{mw: &middleware.Options{NoInvalidation: true}}) // see TestMiddleware_invalidation
	b.get(t, "/m").check(t, 200, "MISS", "GET 1")
	for i, method := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodOptions} {
		b.do(t, method, "/m").check(t, 200, "BYPASS", fmt.Sprintf("%s %d", method, i+2))
	}
	b.get(t, "/m").check(t, 200, "HIT", "GET 1")
	b.get(t, "/m", "X-HTTP-Method-Override", "POST").check(t, 200, "HIT", "GET 1")
	if n := renders.Load(); n != 6 {
		t.Errorf("renders = %d, want 6", n)
	}
}

func TestMiddleware_ttl(t *testing.T) {
	tests := []struct {
		name         string
		cc           string
		opts         middleware.Options
		fresh, stale time.Duration // 0, 0: not stored
	}{
		{"Options.TTL", "", middleware.Options{Freshness: middleware.FreshnessPolicy{Fresh: 30 * time.Second}}, 30 * time.Second, 0},
		{"default TTL", "public", middleware.Options{}, time.Minute, 0},
		{"max-age over TTL", "max-age=50", middleware.Options{Freshness: middleware.FreshnessPolicy{Fresh: 30 * time.Second}}, 50 * time.Second, 0},
		{"s-maxage over max-age", "max-age=50, s-maxage=70", middleware.Options{Freshness: middleware.FreshnessPolicy{Fresh: 30 * time.Second}}, 70 * time.Second, 0},
		{"s-maxage first", "s-maxage=70, max-age=50", middleware.Options{}, 70 * time.Second, 0},
		{"quoted and upper case", `MAX-AGE="45"`, middleware.Options{}, 45 * time.Second, 0},
		{"Options.StaleTTL", "max-age=50", middleware.Options{Freshness: middleware.FreshnessPolicy{Stale: 15 * time.Second}}, 50 * time.Second, 15 * time.Second},
		{"stale-while-revalidate over StaleTTL", "max-age=50, stale-while-revalidate=20", middleware.Options{Freshness: middleware.FreshnessPolicy{Stale: 15 * time.Second}}, 50 * time.Second, 20 * time.Second},
		{"stale-if-error kept past stale-while-revalidate", "max-age=50, stale-while-revalidate=20, stale-if-error=40", middleware.Options{}, 50 * time.Second, 60 * time.Second},
		{"must-revalidate: no stale", "max-age=50, must-revalidate, stale-while-revalidate=20", middleware.Options{Freshness: middleware.FreshnessPolicy{Stale: 15 * time.Second}}, 50 * time.Second, 0},
		{"proxy-revalidate: no stale", "max-age=50, proxy-revalidate", middleware.Options{Freshness: middleware.FreshnessPolicy{Stale: 15 * time.Second}}, 50 * time.Second, 0},
		{"s-maxage: no StaleTTL", "s-maxage=50", middleware.Options{Freshness: middleware.FreshnessPolicy{Stale: 15 * time.Second}}, 50 * time.Second, 0},
		{"s-maxage with its own stale-while-revalidate", "s-maxage=50, stale-while-revalidate=20", middleware.Options{Freshness: middleware.FreshnessPolicy{Stale: 15 * time.Second}}, 50 * time.Second, 20 * time.Second},
		{"max-age=0", "max-age=0", middleware.Options{}, 0, 0},
		{"s-maxage=0 over max-age", "s-maxage=0, max-age=60", middleware.Options{}, 0, 0},
	}
	s := redistest.Shared(t, redistest.Redis8)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var renders atomic.Int32
			opts := tt.opts
			b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tt.cc != "" {
					w.Header().Set("Cache-Control", tt.cc)
				}
				fmt.Fprintf(w, "r%d", renders.Add(1))
			}), &bedOptions{mw: &opts})
			if tt.fresh == 0 {
				b.get(t, "/t").check(t, 200, "BYPASS", "r1")
				b.get(t, "/t").check(t, 200, "BYPASS", "r2")
				b.waitGone(t, "/t")
				return
			}
			b.get(t, "/t").check(t, 200, "MISS", "r1")
			b.waitStored(t, "/t", "r1") // the client is answered before the write
			// The server drops the entry when its stale window ends.
			want := tt.fresh + tt.stale
			if got := b.ttl(t, "/t"); got > want || got < want-5*time.Second {
				t.Errorf("server TTL = %v, want %v", got, want)
			}
			b.clock.Advance(tt.fresh - time.Second)
			hit := b.get(t, "/t")
			hit.check(t, 200, "HIT", "r1")
			if age, want := hit.header.Get("Age"), strconv.Itoa(int((tt.fresh - time.Second).Seconds())); age != want {
				t.Errorf("Age = %s, want %s", age, want)
			}
			if tt.stale > 0 {
				b.clock.Advance(2 * time.Second)
				b.get(t, "/t").check(t, 200, "STALE", "r1")
			}
		})
	}
}

func TestMiddleware_statuses(t *testing.T) {
	always := func(int, http.Header) bool { return true }
	tests := []struct {
		name   string
		status int
		opts   middleware.Options
		stored bool
	}{
		{"200", 200, middleware.Options{}, true},
		{"204", 204, middleware.Options{}, true},
		{"301", 301, middleware.Options{}, true},
		{"404", 404, middleware.Options{}, true},
		{"410", 410, middleware.Options{}, true},
		{"501 (heuristically cacheable)", 501, middleware.Options{}, true},
		{"302", 302, middleware.Options{}, false},
		{"206", 206, middleware.Options{}, false},
		{"400", 400, middleware.Options{}, false},
		{"500", 500, middleware.Options{}, false},
		{"502", 502, middleware.Options{}, false},
		{"503", 503, middleware.Options{}, false},
		{"504", 504, middleware.Options{}, false},
		{"Statuses without 200", 200, middleware.Options{Statuses: []int{404}}, false},
		{"Statuses with 404", 404, middleware.Options{Statuses: []int{404}}, true},
		{"ShouldCache yes to 302", 302, middleware.Options{ShouldCache: func(s int, _ http.Header) bool { return s == 302 }}, true},
		{"ShouldCache no to 200", 200, middleware.Options{ShouldCache: func(s int, _ http.Header) bool { return s == 302 }}, false},
		{"ShouldCache reads the header", 200, middleware.Options{ShouldCache: func(_ int, h http.Header) bool { return h.Get("X-Kind") == "status-test" }}, true},
		{"ShouldCache cannot store a 500", 500, middleware.Options{ShouldCache: always}, false},
		{"ShouldCache cannot store a 503", 503, middleware.Options{ShouldCache: always}, false},
	}
	s := redistest.Shared(t, redistest.Redis8)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var renders atomic.Int32
			opts := tt.opts
			b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := renders.Add(1)
				w.Header().Set("X-Kind", "status-test")
				w.Header().Set("X-Render", strconv.Itoa(int(n)))
				if tt.status == 302 || tt.status == 301 {
					w.Header().Set("Location", "/elsewhere")
				}
				w.WriteHeader(tt.status)
				if tt.status != 204 {
					fmt.Fprintf(w, "s%d", n)
				}
			}), &bedOptions{mw: &opts})
			body := func(n int) string {
				if tt.status == 204 {
					return ""
				}
				return fmt.Sprintf("s%d", n)
			}
			first, second := b.get(t, "/st"), b.get(t, "/st")
			if tt.stored {
				first.check(t, tt.status, "MISS", body(1))
				second.check(t, tt.status, "HIT", body(1))
			} else {
				first.check(t, tt.status, "BYPASS", body(1))
				second.check(t, tt.status, "BYPASS", body(2))
			}
			if got := second.header.Get("X-Render"); tt.stored && got != "1" {
				t.Errorf("X-Render = %s on a hit", got)
			}
			if tt.stored && !b.stored(t, "/st") {
				t.Error("no entry on the server")
			} else if !tt.stored {
				b.waitGone(t, "/st")
			}
		})
	}
}

func TestMiddleware_allowNoCache(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	tests := []struct {
		name  string
		allow bool
	}{
		{"off", false},
		{"on", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var renders atomic.Int32
			b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprintf(w, "v%d", renders.Add(1))
			}), &bedOptions{mw: &middleware.Options{AllowNoCache: tt.allow}})
			b.get(t, "/n").check(t, 200, "MISS", "v1")
			if !tt.allow {
				b.get(t, "/n", "Cache-Control", "no-cache").check(t, 200, "HIT", "v1")
				b.get(t, "/n", "Pragma", "no-cache").check(t, 200, "HIT", "v1")
				b.get(t, "/n", "Cache-Control", "max-age=0").check(t, 200, "HIT", "v1")
			} else {
				b.get(t, "/n", "Cache-Control", "no-cache").check(t, 200, "MISS", "v2")
				b.get(t, "/n").check(t, 200, "HIT", "v2")
				b.get(t, "/n", "Pragma", "no-cache").check(t, 200, "MISS", "v3")
				b.get(t, "/n").check(t, 200, "HIT", "v3")
			}
			// no-store is honoured either way: rendered, not stored.
			next := renders.Load() + 1
			b.get(t, "/n", "Cache-Control", "no-store").check(t, 200, "BYPASS", fmt.Sprintf("v%d", next))
			b.get(t, "/n").check(t, 200, "HIT", fmt.Sprintf("v%d", next-1))
		})
	}
}

// TestMiddleware_ageAndDate: a response's age when received (RFC 9111
// 4.2.3: the larger of its Age field and the time since its Date) counts
// against its freshness and in the Age of every answer; of an Age field
// the first member of the first line counts, and one that is not a
// non-negative integer is ignored (RFC 9111 5.1), parameters dropped; the origin's Date is
// served as it was, and a response without one gets the time it was
// received. Before, Age and Date were dropped: a response whose Age
// exceeded its max-age was stored and served as fresh.
func TestMiddleware_ageAndDate(t *testing.T) {
	date := func(c *settableClock, d time.Duration) string { return c.Now().Add(d).UTC().Format(http.TimeFormat) }
	type field struct {
		name string
		at   time.Duration // a date this far from the clock, if value is ""
		val  string
	}
	tests := []struct {
		name    string
		fields  []field
		stored  bool
		age     int           // Age of the first answer, when stored
		dateAt  time.Duration // the Date answers carry, from the clock at the render
		advance time.Duration // then the clock moves this far, and a hit's Age is age+advance
	}{
		{"Age over max-age", []field{{"Cache-Control", 0, "max-age=3600"}, {"Age", 0, "7200"}}, false, 0, 0, 0},
		{"Age counted", []field{{"Cache-Control", 0, "max-age=600"}, {"Age", 0, "30"}}, true, 30, 0, 5 * time.Second},
		{"Age with Expires", []field{{"Expires", 30 * time.Hour, ""}, {"Date", 0, ""}, {"Age", 0, "30"}}, true, 30, 0, 5 * time.Second},
		{"Date kept and counted", []field{{"Cache-Control", 0, "max-age=600"}, {"Date", -5 * time.Second, ""}}, true, 5, -5 * time.Second, 10 * time.Second},
		{"no Date: the render's", []field{{"Cache-Control", 0, "max-age=600"}}, true, 0, 0, 10 * time.Second},
		{"Expires less Date, slow Date", []field{{"Date", -10 * time.Second, ""}, {"Expires", 10 * time.Second, ""}, {"Age", 0, "25"}}, false, 0, 0, 0},
		{"Expires less Date, fast Date", []field{{"Date", 10 * time.Second, ""}, {"Expires", 20 * time.Second, ""}, {"Age", 0, "15"}}, false, 0, 0, 0},
		{"Age not a number: ignored", []field{{"Cache-Control", 0, "max-age=3600"}, {"Age", 0, "abc"}}, true, 0, 0, 5 * time.Second},
		{"Age negative: ignored", []field{{"Cache-Control", 0, "max-age=3600"}, {"Age", 0, "-7200"}}, true, 0, 0, 5 * time.Second},
		{"Age a fraction: ignored", []field{{"Cache-Control", 0, "max-age=3600"}, {"Age", 0, "7200.0"}}, true, 0, 0, 5 * time.Second},
		{"Age ignored, Date counts", []field{{"Cache-Control", 0, "max-age=3600"}, {"Age", 0, "abc"}, {"Date", -2 * time.Hour, ""}}, false, 0, 0, 0},
		{"Age a list: the first", []field{{"Cache-Control", 0, "max-age=3600"}, {"Age", 0, "20, 7200"}}, true, 20, 0, 5 * time.Second},
		{"Age a list: the first, old", []field{{"Cache-Control", 0, "max-age=3600"}, {"Age", 0, "7200, 0"}}, false, 0, 0, 0},
		{"Age twice: the first line", []field{{"Cache-Control", 0, "max-age=3600"}, {"Age", 0, "7200"}, {"Age", 0, "0"}}, false, 0, 0, 0},
		{"Age twice: the first line, young", []field{{"Cache-Control", 0, "max-age=3600"}, {"Age", 0, "10"}, {"Age", 0, "7200"}}, true, 10, 0, 5 * time.Second},
		{"Age with a parameter: the number", []field{{"Cache-Control", 0, "max-age=3600"}, {"Age", 0, "7200;foo=1"}}, false, 0, 0, 0},
		{"Age huge", []field{{"Cache-Control", 0, "max-age=3600"}, {"Age", 0, "99999999999999999999999"}}, false, 0, 0, 0},
	}
	s := redistest.Shared(t, redistest.Redis8)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			renders := 0
			var b *testBed
			b = newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				renders++
				for _, f := range tt.fields {
					v := f.val
					if v == "" {
						v = date(b.clock, f.at)
					}
					w.Header().Add(f.name, v)
				}
				fmt.Fprintf(w, "r%d", renders)
			}), nil)
			wantDate := date(b.clock, tt.dateAt)
			if !tt.stored {
				b.get(t, "/a").check(t, 200, "BYPASS", "r1")
				b.get(t, "/a").check(t, 200, "BYPASS", "r2")
				return
			}
			miss := b.get(t, "/a")
			miss.check(t, 200, "MISS", "r1")
			b.waitStored(t, "/a", "r1")
			b.clock.Advance(tt.advance)
			hit := b.get(t, "/a")
			hit.check(t, 200, "HIT", "r1")
			for _, a := range []struct {
				r   reply
				age int
			}{{miss, tt.age}, {hit, tt.age + int(tt.advance/time.Second)}} {
				if got := a.r.header.Values("Age"); len(got) != 1 || got[0] != strconv.Itoa(a.age) {
					t.Errorf("%s: Age %q, want %d", a.r.cache(), got, a.age)
				}
				if got := a.r.header.Values("Date"); len(got) != 1 || got[0] != wantDate {
					t.Errorf("%s: Date %q, want %s", a.r.cache(), got, wantDate)
				}
			}
		})
	}
}

// TestMiddleware_explicitFreshness: with Freshness.Explicit only responses
// that say how long they are fresh are stored; without it (the default)
// the others are fresh for TTL, as before.
func TestMiddleware_explicitFreshness(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	for _, tt := range []struct {
		name     string
		explicit bool
		header   []string // name, value pairs; "@expires" is a date 30s on
		stored   bool
	}{
		{"nothing said", true, nil, false},
		{"public only", true, []string{"Cache-Control", "public"}, false},
		{"Last-Modified only", true, []string{"Last-Modified", "Mon, 02 Jan 2006 15:04:05 GMT"}, false},
		{"max-age", true, []string{"Cache-Control", "max-age=30"}, true},
		{"s-maxage", true, []string{"Cache-Control", "public, s-maxage=30"}, true},
		{"Expires", true, []string{"Expires", "@expires"}, true},
		{"default: TTL", false, nil, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var renders atomic.Int32
			var b *testBed
			b = newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for i := 0; i+1 < len(tt.header); i += 2 {
					v := tt.header[i+1]
					if v == "@expires" {
						v = b.clock.Now().Add(30 * time.Second).UTC().Format(http.TimeFormat)
					}
					w.Header().Set(tt.header[i], v)
				}
				fmt.Fprintf(w, "r%d", renders.Add(1))
			}), &bedOptions{mw: &middleware.Options{Freshness: middleware.FreshnessPolicy{Explicit: tt.explicit, Fresh: time.Hour}}})
			if !tt.stored {
				b.get(t, "/x").check(t, 200, "BYPASS", "r1")
				b.get(t, "/x").check(t, 200, "BYPASS", "r2")
				return
			}
			b.get(t, "/x").check(t, 200, "MISS", "r1")
			b.waitStored(t, "/x", "r1")
			b.get(t, "/x").check(t, 200, "HIT", "r1")
		})
	}
}

// TestMiddleware_explicitFreshnessStatuses: with Freshness.Explicit a
// response that says how long it is fresh is stored whatever its final
// status (RFC 9111 3), except 206 and the server errors but 501, and a
// status net/http does not know is not stored with must-understand, and
// a known one is even with no-store beside it (RFC 9111 5.2.2.3); by
// default only the Statuses' list is.
func TestMiddleware_explicitFreshnessStatuses(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	for _, tt := range []struct {
		status   int
		cc       string
		explicit bool
		stored   bool
	}{
		{302, "max-age=60", true, true},
		{302, "max-age=60", false, false},
		{307, "max-age=60", true, true},
		{400, "max-age=60", true, true},
		{299, "max-age=60", true, true},
		{299, "max-age=60, must-understand", true, false},
		{200, "max-age=60, must-understand", true, true},
		{200, "max-age=60, no-store, must-understand", true, true},
		{299, "max-age=60, no-store, must-understand", true, false},
		{206, "max-age=60", true, false},
		{500, "max-age=60", true, false},
		{503, "max-age=60, public", true, false},
		{599, "max-age=60", true, false},
		{501, "max-age=60", true, true},
	} {
		t.Run(fmt.Sprintf("%d %s explicit=%v", tt.status, tt.cc, tt.explicit), func(t *testing.T) {
			var renders atomic.Int32
			b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Cache-Control", tt.cc)
				w.Header().Set("Location", "/elsewhere")
				w.WriteHeader(tt.status)
				fmt.Fprintf(w, "r%d", renders.Add(1))
			}), &bedOptions{mw: &middleware.Options{Freshness: middleware.FreshnessPolicy{Explicit: tt.explicit}}})
			if !tt.stored {
				b.get(t, "/s").check(t, tt.status, "BYPASS", "r1")
				b.get(t, "/s").check(t, tt.status, "BYPASS", "r2")
				return
			}
			b.get(t, "/s").check(t, tt.status, "MISS", "r1")
			b.waitStored(t, "/s", "r1")
			b.get(t, "/s").check(t, tt.status, "HIT", "r1")
		})
	}
}

// TestMiddleware_heuristicFreshness: with Freshness.Heuristic a response
// without explicit freshness but with Last-Modified is fresh for that
// fraction of the time since then (RFC 9111 4.2.2), at most
// HeuristicMaxAge, if its status is heuristically cacheable or it says
// public; with Freshness.Explicit it is stored then, without it the
// heuristic comes before TTL. Explicit freshness always wins, and a
// Last-Modified later than the Date, or not one valid date, gives no
// heuristic (TTL, or with Freshness.Explicit not stored).
func TestMiddleware_heuristicFreshness(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	at := func(d time.Duration) func(time.Time) string {
		return func(now time.Time) string { return now.Add(d).UTC().Format(http.TimeFormat) }
	}
	fixed := func(v string) func(time.Time) string { return func(time.Time) string { return v } }
	const explicit, fraction = true, 0.1
	tests := []struct {
		name   string
		status int
		hdr    map[string][]func(time.Time) string
		opts   middleware.Options
		fresh  time.Duration // 0: not stored
	}{
		{"200, a tenth of 10h", 200, map[string][]func(time.Time) string{"Last-Modified": {at(-10 * time.Hour)}, "Date": {at(0)}},
			middleware.Options{Freshness: middleware.FreshnessPolicy{Explicit: explicit, Heuristic: fraction}}, time.Hour},
		{"without Date: counted to when received", 200, map[string][]func(time.Time) string{"Last-Modified": {at(-10 * time.Hour)}},
			middleware.Options{Freshness: middleware.FreshnessPolicy{Explicit: explicit, Heuristic: fraction}}, time.Hour},
		{"a tenth of 10h to Date, an hour old: passed", 200, map[string][]func(time.Time) string{"Last-Modified": {at(-11 * time.Hour)}, "Date": {at(-time.Hour)}},
			middleware.Options{Freshness: middleware.FreshnessPolicy{Explicit: explicit, Heuristic: fraction}}, 0},
		{"fraction 0.5", 404, map[string][]func(time.Time) string{"Last-Modified": {at(-time.Hour)}, "Date": {at(0)}},
			middleware.Options{Freshness: middleware.FreshnessPolicy{Explicit: explicit, Heuristic: 0.5}}, 30 * time.Minute},
		{"capped at a day", 200, map[string][]func(time.Time) string{"Last-Modified": {fixed("Mon, 02 Jan 2006 15:04:05 GMT")}},
			middleware.Options{Freshness: middleware.FreshnessPolicy{Explicit: explicit, Heuristic: fraction}}, 24 * time.Hour},
		{"capped at HeuristicMaxAge", 200, map[string][]func(time.Time) string{"Last-Modified": {at(-100 * time.Hour)}},
			middleware.Options{Freshness: middleware.FreshnessPolicy{Explicit: explicit, Heuristic: fraction, HeuristicMaxAge: 2 * time.Hour}}, 2 * time.Hour},
		{"501", 501, map[string][]func(time.Time) string{"Last-Modified": {at(-10 * time.Hour)}},
			middleware.Options{Freshness: middleware.FreshnessPolicy{Explicit: explicit, Heuristic: fraction}}, time.Hour},
		{"302 is not heuristically cacheable", 302, map[string][]func(time.Time) string{"Last-Modified": {at(-10 * time.Hour)}},
			middleware.Options{Freshness: middleware.FreshnessPolicy{Explicit: explicit, Heuristic: fraction}}, 0},
		{"201 is not heuristically cacheable", 201, map[string][]func(time.Time) string{"Last-Modified": {at(-10 * time.Hour)}},
			middleware.Options{Freshness: middleware.FreshnessPolicy{Explicit: explicit, Heuristic: fraction}}, 0},
		{"302 with public", 302, map[string][]func(time.Time) string{"Last-Modified": {at(-10 * time.Hour)}, "Cache-Control": {fixed("public")}},
			middleware.Options{Freshness: middleware.FreshnessPolicy{Explicit: explicit, Heuristic: fraction}}, time.Hour},
		{"503 with public: never a server error", 503, map[string][]func(time.Time) string{"Last-Modified": {at(-10 * time.Hour)}, "Cache-Control": {fixed("public")}},
			middleware.Options{Freshness: middleware.FreshnessPolicy{Explicit: explicit, Heuristic: fraction}}, 0},
		{"private", 200, map[string][]func(time.Time) string{"Last-Modified": {at(-10 * time.Hour)}, "Cache-Control": {fixed("private")}},
			middleware.Options{Freshness: middleware.FreshnessPolicy{Explicit: explicit, Heuristic: fraction}}, 0},
		{"max-age wins", 200, map[string][]func(time.Time) string{"Last-Modified": {at(-10 * time.Hour)}, "Cache-Control": {fixed("max-age=30")}},
			middleware.Options{Freshness: middleware.FreshnessPolicy{Explicit: explicit, Heuristic: fraction}}, 30 * time.Second},
		{"Expires wins", 200, map[string][]func(time.Time) string{"Last-Modified": {at(-10 * time.Hour)}, "Expires": {at(40 * time.Second)}},
			middleware.Options{Freshness: middleware.FreshnessPolicy{Explicit: explicit, Heuristic: fraction}}, 40 * time.Second},
		{"an invalid Expires wins too", 200, map[string][]func(time.Time) string{"Last-Modified": {at(-10 * time.Hour)}, "Expires": {fixed("0")}},
			middleware.Options{Freshness: middleware.FreshnessPolicy{Explicit: explicit, Heuristic: fraction}}, 0},
		{"off: not stored", 200, map[string][]func(time.Time) string{"Last-Modified": {at(-10 * time.Hour)}},
			middleware.Options{Freshness: middleware.FreshnessPolicy{Explicit: explicit}}, 0},
		{"Last-Modified in the future", 200, map[string][]func(time.Time) string{"Last-Modified": {at(time.Hour)}},
			middleware.Options{Freshness: middleware.FreshnessPolicy{Explicit: explicit, Heuristic: fraction}}, 0},
		{"Last-Modified after Date", 200, map[string][]func(time.Time) string{"Last-Modified": {at(-time.Hour)}, "Date": {at(-2 * time.Hour)}},
			middleware.Options{Freshness: middleware.FreshnessPolicy{Explicit: explicit, Heuristic: fraction}}, 0},
		{"Last-Modified not a date", 200, map[string][]func(time.Time) string{"Last-Modified": {fixed("yesterday")}},
			middleware.Options{Freshness: middleware.FreshnessPolicy{Explicit: explicit, Heuristic: fraction}}, 0},
		{"two Last-Modified that disagree", 200, map[string][]func(time.Time) string{"Last-Modified": {at(-10 * time.Hour), at(-20 * time.Hour)}},
			middleware.Options{Freshness: middleware.FreshnessPolicy{Explicit: explicit, Heuristic: fraction}}, 0},
		{"Last-Modified is Date: no freshness, not TTL", 200, map[string][]func(time.Time) string{"Last-Modified": {at(0)}, "Date": {at(0)}},
			middleware.Options{Freshness: middleware.FreshnessPolicy{Heuristic: fraction, Fresh: time.Hour}}, 0},
		{"defaults: heuristic before TTL", 200, map[string][]func(time.Time) string{"Last-Modified": {at(-10 * time.Hour)}},
			middleware.Options{Freshness: middleware.FreshnessPolicy{Heuristic: fraction, Fresh: 10 * time.Minute}}, time.Hour},
		{"defaults: TTL without Last-Modified", 200, nil,
			middleware.Options{Freshness: middleware.FreshnessPolicy{Heuristic: fraction, Fresh: 10 * time.Minute}}, 10 * time.Minute},
		{"defaults: TTL for Last-Modified in the future", 200, map[string][]func(time.Time) string{"Last-Modified": {at(time.Hour)}},
			middleware.Options{Freshness: middleware.FreshnessPolicy{Heuristic: fraction, Fresh: 10 * time.Minute}}, 10 * time.Minute},
		{"defaults: TTL for a status Statuses allows but the heuristic does not cover", 302, map[string][]func(time.Time) string{"Last-Modified": {at(-10 * time.Hour)}},
			middleware.Options{Freshness: middleware.FreshnessPolicy{Heuristic: fraction, Fresh: 10 * time.Minute}, Statuses: []int{200, 302}}, 10 * time.Minute},
		{"defaults: Statuses still decide", 404, map[string][]func(time.Time) string{"Last-Modified": {at(-10 * time.Hour)}},
			middleware.Options{Freshness: middleware.FreshnessPolicy{Heuristic: fraction}, Statuses: []int{200}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fresh := tt.fresh
			var renders atomic.Int32
			opts := tt.opts
			var b *testBed
			b = newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for k, fs := range tt.hdr {
					for _, f := range fs {
						w.Header().Add(k, f(b.clock.Now()))
					}
				}
				w.WriteHeader(tt.status)
				fmt.Fprintf(w, "r%d", renders.Add(1))
			}), &bedOptions{procs: 2, mw: &opts})
			if fresh == 0 {
				b.get(t, "/h").check(t, tt.status, "BYPASS", "r1")
				b.get(t, "/h", procHeader, "1").check(t, tt.status, "BYPASS", "r2")
				b.waitGone(t, "/h")
				return
			}
			b.get(t, "/h").check(t, tt.status, "MISS", "r1")
			b.waitStored(t, "/h", "r1")
			b.clock.Advance(fresh - time.Second)
			b.get(t, "/h", procHeader, "1").check(t, tt.status, "HIT", "r1")
			b.clock.Advance(2 * time.Second)
			if r := b.get(t, "/h"); r.cache() == "HIT" {
				t.Errorf("%v past its freshness lifetime %v", r, fresh)
			}
		})
	}
}

// TestMiddleware_heuristicFreshnessAge: the heuristic lifetime counts from
// Last-Modified to the response's Date, and the response's age when
// received (Date an hour ago) is taken off it as for any lifetime.
func TestMiddleware_heuristicFreshnessAge(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	var renders atomic.Int32
	var b *testBed
	b = newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := b.clock.Now()
		w.Header().Set("Date", now.Add(-time.Hour).UTC().Format(http.TimeFormat))
		w.Header().Set("Last-Modified", now.Add(-21*time.Hour).UTC().Format(http.TimeFormat))
		fmt.Fprintf(w, "r%d", renders.Add(1))
	}), &bedOptions{mw: &middleware.Options{Freshness: middleware.FreshnessPolicy{Explicit: true, Heuristic: 0.1}}})
	// 20h between Last-Modified and Date: 2h fresh, 1h of it gone.
	b.get(t, "/age").check(t, 200, "MISS", "r1")
	b.waitStored(t, "/age", "r1")
	b.clock.Advance(time.Hour - time.Second)
	hit := b.get(t, "/age")
	hit.check(t, 200, "HIT", "r1")
	if got, want := hit.header.Get("Age"), fmt.Sprint(int((2*time.Hour - time.Second).Seconds())); got != want {
		t.Errorf("Age = %s, want %s", got, want)
	}
	b.clock.Advance(2 * time.Second)
	if r := b.get(t, "/age"); r.cache() == "HIT" {
		t.Errorf("%v past its freshness lifetime", r)
	}
}

// TestMiddleware_surrogateControl: with SurrogateControl the response's
// Surrogate-Control max-age comes before Cache-Control's and Expires'
// freshness and its no-store keeps the response out; it never stores what
// Cache-Control forbids, ignores directives targeted at a device, and is
// ignored without the option.
func TestMiddleware_surrogateControl(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	for _, tt := range []struct {
		name   string
		on     bool
		header []string
		fresh  time.Duration // 0: not stored
	}{
		{"max-age", true, []string{"Surrogate-Control", "max-age=3600"}, time.Hour},
		{"before Cache-Control", true, []string{"Cache-Control", "max-age=3600", "Surrogate-Control", "max-age=10"}, 10 * time.Second},
		{"no-store", true, []string{"Cache-Control", "max-age=3600", "Surrogate-Control", "no-store"}, 0},
		{"max-age=0", true, []string{"Cache-Control", "max-age=3600", "Surrogate-Control", "max-age=0"}, 0},
		{"Cache-Control no-store wins", true, []string{"Cache-Control", "no-store", "Surrogate-Control", "max-age=3600"}, 0},
		{"Cache-Control private wins", true, []string{"Cache-Control", "private", "Surrogate-Control", "max-age=3600"}, 0},
		{"targeted: ignored", true, []string{"Cache-Control", "max-age=20", "Surrogate-Control", "max-age=3600;cdn"}, 20 * time.Second},
		{"Age counts", true, []string{"Surrogate-Control", "max-age=3600", "Age", "7200"}, 0},
		{"off", false, []string{"Cache-Control", "max-age=20", "Surrogate-Control", "no-store"}, 20 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var renders atomic.Int32
			b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for i := 0; i+1 < len(tt.header); i += 2 {
					w.Header().Set(tt.header[i], tt.header[i+1])
				}
				fmt.Fprintf(w, "r%d", renders.Add(1))
			}), &bedOptions{mw: &middleware.Options{SurrogateControl: tt.on, Freshness: middleware.FreshnessPolicy{Explicit: true}}})
			if tt.fresh == 0 {
				b.get(t, "/sc").check(t, 200, "BYPASS", "r1")
				b.get(t, "/sc").check(t, 200, "BYPASS", "r2")
				return
			}
			b.get(t, "/sc").check(t, 200, "MISS", "r1")
			b.waitStored(t, "/sc", "r1")
			// The server drops the entry when it goes stale.
			if got := b.ttl(t, "/sc"); got > tt.fresh || got < tt.fresh-5*time.Second {
				t.Errorf("server TTL = %v, want %v", got, tt.fresh)
			}
			b.clock.Advance(tt.fresh - time.Second)
			b.get(t, "/sc").check(t, 200, "HIT", "r1")
		})
	}
}
