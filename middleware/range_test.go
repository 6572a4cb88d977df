package middleware_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/middleware"
)

// rangeHandler serves body with http.ServeContent (which answers Range
// itself, for requests that reach it), max-age=60, ETag "v1" and a
// Last-Modified an hour before the bed's clock, counting its renders.
func rangeHandler(b **testBed, renders *atomic.Int32, body string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		renders.Add(1)
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("ETag", `"v1"`)
		http.ServeContent(w, r, "", (*b).clock.Now().Add(-time.Hour), strings.NewReader(body))
	})
}

// TestMiddleware_rangeFromStored: a GET with Range is answered from a
// fresh stored 200, in every process, without a render: one byte range
// with a 206 and Content-Range, an unsatisfiable one with a 416 and
// "bytes */length", and anything else (several ranges, a syntax error,
// another unit, an If-Range that does not hold) with the whole response
// (RFC 9110 14). Numbers too large for int64 neither overflow nor fail.
func TestMiddleware_rangeFromStored(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	const body = "0123456789A"
	var renders atomic.Int32
	var b *testBed
	b = newTestBed(t, s, rangeHandler(&b, &renders, body), &bedOptions{procs: 2})
	b.get(t, "/r").check(t, 200, "MISS", body)
	b.waitStored(t, "/r", body)
	lastModified := b.clock.Now().Add(-time.Hour).UTC().Format(http.TimeFormat)
	hitsBefore := b.stats().Hits

	tests := []struct {
		name   string
		hdr    []string
		status int
		body   string
		crange string // Content-Range; "" none
	}{
		{"first two", []string{"Range", "bytes=0-1"}, 206, "01", "bytes 0-1/11"},
		{"from 1 on", []string{"Range", "bytes=1-"}, 206, "123456789A", "bytes 1-10/11"},
		{"the last", []string{"Range", "bytes=-1"}, 206, "A", "bytes 10-10/11"},
		{"suffix longer than the body", []string{"Range", "bytes=-100"}, 206, body, "bytes 0-10/11"},
		{"last past the end", []string{"Range", "bytes=5-100"}, 206, "56789A", "bytes 5-10/11"},
		{"one byte at the end", []string{"Range", "bytes=10-10"}, 206, "A", "bytes 10-10/11"},
		{"unit in upper case, spaces", []string{"Range", "BYTES = 2-3 "}, 206, "23", "bytes 2-3/11"},
		{"empty list elements", []string{"Range", "bytes=, 0-1 ,"}, 206, "01", "bytes 0-1/11"},
		{"huge last", []string{"Range", "bytes=0-99999999999999999999999999"}, 206, body, "bytes 0-10/11"},
		{"huge suffix", []string{"Range", "bytes=-99999999999999999999999999"}, 206, body, "bytes 0-10/11"},
		{"starts at the end", []string{"Range", "bytes=11-"}, 416, "", "bytes */11"},
		{"huge start", []string{"Range", "bytes=99999999999999999999999999-"}, 416, "", "bytes */11"},
		{"empty suffix", []string{"Range", "bytes=-0"}, 416, "", "bytes */11"},
		{"two ranges: whole", []string{"Range", "bytes=0-1,3-4"}, 200, body, ""},
		{"two fields: whole", []string{"Range", "bytes=0-1", "Range", "bytes=3-4"}, 200, body, ""},
		{"last before first: whole", []string{"Range", "bytes=3-1"}, 200, body, ""},
		{"not numbers: whole", []string{"Range", "bytes=a-b"}, 200, body, ""},
		{"signs: whole", []string{"Range", "bytes=+1-2"}, 200, body, ""},
		{"double dash: whole", []string{"Range", "bytes=--1"}, 200, body, ""},
		{"no dash: whole", []string{"Range", "bytes=5"}, 200, body, ""},
		{"other unit: whole", []string{"Range", "items=0-1"}, 200, body, ""},
		{"no unit: whole", []string{"Range", "0-1"}, 200, body, ""},
		{"If-Range with the ETag", []string{"Range", "bytes=0-1", "If-Range", `"v1"`}, 206, "01", "bytes 0-1/11"},
		{"If-Range with another ETag: whole", []string{"Range", "bytes=0-1", "If-Range", `"v0"`}, 200, body, ""},
		{"If-Range with a weak ETag: whole", []string{"Range", "bytes=0-1", "If-Range", `W/"v1"`}, 200, body, ""},
		{"If-Range with Last-Modified", []string{"Range", "bytes=0-1", "If-Range", lastModified}, 206, "01", "bytes 0-1/11"},
		{"If-Range with another date: whole", []string{"Range", "bytes=0-1", "If-Range", "Mon, 02 Jan 2006 15:04:05 GMT"}, 200, body, ""},
		{"If-Range not a validator: whole", []string{"Range", "bytes=0-1", "If-Range", "v1"}, 200, body, ""},
		{"If-Range twice: whole", []string{"Range", "bytes=0-1", "If-Range", `"v1"`, "If-Range", `"v1"`}, 200, body, ""},
		{"If-Range and unsatisfiable", []string{"Range", "bytes=20-", "If-Range", `"v1"`}, 416, "", "bytes */11"},
		{"If-Range fails, unsatisfiable: whole", []string{"Range", "bytes=20-", "If-Range", `"v0"`}, 200, body, ""},
		{"If-None-Match first: 304", []string{"Range", "bytes=0-1", "If-None-Match", `"v1"`}, 304, "", ""},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := b.get(t, "/r", append(tt.hdr, procHeader, fmt.Sprint(i%2))...)
			r.check(t, tt.status, "HIT", tt.body)
			if got := r.header.Get("Content-Range"); got != tt.crange {
				t.Errorf("Content-Range %q, want %q", got, tt.crange)
			}
			if tt.status == 304 {
				return
			}
			if got, want := r.header.Get("Content-Length"), fmt.Sprint(len(tt.body)); got != want {
				t.Errorf("Content-Length %s, want %s", got, want)
			}
			if tt.status != 416 {
				if r.header.Get("Etag") != `"v1"` || r.header.Get("Cache-Control") != "max-age=60" || r.header.Get("Age") == "" {
					t.Errorf("header %v, want the stored one with Age", r.header)
				}
			}
		})
	}
	if n := renders.Load(); n != 1 {
		t.Errorf("%d renders, want 1", n)
	}
	if got, want := b.stats().Hits-hitsBefore, uint64(len(tests)); got != want {
		t.Errorf("%d hits counted, want %d", got, want)
	}
}

// TestMiddleware_rangeOtherwise: a GET with Range that finds no fresh
// stored response for it shares the render of its key and gets its range
// of it, also when its stored response is revalidated; a render that
// cannot be stored (no-store, or larger than StoreLimit) is stopped and
// the handler answers the client's Range alone; a HEAD with Range and,
// with AllowNoCache, a GET with no-cache go to the handler as they are;
// a stored variant is found by a process that has not seen its Vary;
// other statuses than 200 are served whole.
func TestMiddleware_rangeOtherwise(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	const body = "0123456789A"

	t.Run("nothing stored, then stored, then revalidated", func(t *testing.T) {
		var renders atomic.Int32
		var b *testBed
		b = newTestBed(t, s, rangeHandler(&b, &renders, body), &bedOptions{procs: 2})
		r := b.get(t, "/m", "Range", "bytes=0-1")
		r.check(t, 206, "MISS", "01")
		if got := r.header.Get("Content-Range"); got != "bytes 0-1/11" {
			t.Errorf("Content-Range %q", got)
		}
		b.waitStored(t, "/m", body)
		b.get(t, "/m", "Range", "bytes=0-1", procHeader, "1").check(t, 206, "HIT", "01")
		b.clock.Advance(61 * time.Second) // kept, with its ETag: revalidated
		b.get(t, "/m", "Range", "bytes=2-3").check(t, 206, "MISS", "23")
		b.get(t, "/m", procHeader, "1").check(t, 200, "HIT", body)
		if n := renders.Load(); n != 2 {
			t.Errorf("%d renders, want 2", n)
		}
	})

	for _, tt := range []struct {
		name  string
		cc    string
		limit int
	}{
		{"not storable: the handler answers the range", "no-store", 0},
		{"larger than StoreLimit: the handler answers the range", "max-age=60", 4},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var renders, ranges atomic.Int32
			b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				renders.Add(1)
				if r.Header.Get("Range") != "" {
					ranges.Add(1)
				}
				w.Header().Set("Cache-Control", tt.cc)
				http.ServeContent(w, r, "", time.Time{}, strings.NewReader(body))
			}), &bedOptions{mw: &middleware.Options{StoreLimit: tt.limit}})
			r := b.get(t, "/ns", "Range", "bytes=-2")
			r.check(t, 206, "BYPASS", "9A")
			if got := r.header.Get("Content-Range"); got != "bytes 9-10/11" {
				t.Errorf("Content-Range %q", got)
			}
			if n, nr := renders.Load(), ranges.Load(); n != 2 || nr != 1 {
				t.Errorf("%d renders, %d with Range; want the shared one and the client's own", n, nr)
			}
		})
	}

	t.Run("HEAD and no-cache go to the handler", func(t *testing.T) {
		var renders atomic.Int32
		var b *testBed
		b = newTestBed(t, s, rangeHandler(&b, &renders, body), &bedOptions{mw: &middleware.Options{AllowNoCache: true}})
		b.get(t, "/h").check(t, 200, "MISS", body)
		b.waitStored(t, "/h", body)
		b.get(t, "/h", "Range", "bytes=0-1").check(t, 206, "HIT", "01")
		head := b.do(t, http.MethodHead, "/h", "Range", "bytes=0-1")
		if head.status != 206 || head.cache() != "BYPASS" {
			t.Errorf("HEAD with Range: %v, want the handler's 206", head)
		}
		b.get(t, "/h", "Range", "bytes=0-1", "Cache-Control", "no-cache").check(t, 206, "BYPASS", "01")
		if n := renders.Load(); n != 3 {
			t.Errorf("%d renders, want 3", n)
		}
	})

	t.Run("a Vary variant, from a process that did not see the Vary", func(t *testing.T) {
		var renders atomic.Int32
		var b *testBed
		h := rangeHandler(&b, &renders, body)
		b = newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Vary", "X-Lang")
			h.ServeHTTP(w, r)
		}), &bedOptions{procs: 2})
		b.get(t, "/v", "X-Lang", "en").check(t, 200, "MISS", body)
		b.waitStored(t, "/v", "X-Lang") // the marker under the plain key
		ctx := testContext(t, 10*time.Second)
		redistest.WaitFor(t, ctx, "the variant stored", func() bool { return b.stored(t, "/v", "\nvary X-Lang: en") })
		b.get(t, "/v", "X-Lang", "en", "Range", "bytes=-2", procHeader, "1").check(t, 206, "HIT", "9A")
		b.get(t, "/v", "X-Lang", "fr", "Range", "bytes=-2", procHeader, "1").check(t, 206, "MISS", "9A")
		b.get(t, "/v", "Range", "bytes=-2").check(t, 206, "MISS", "9A")
		if n := renders.Load(); n != 3 {
			t.Errorf("%d renders, want 3", n)
		}
	})

	t.Run("a stored 404 is served whole", func(t *testing.T) {
		var renders atomic.Int32
		b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Cache-Control", "max-age=60")
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintf(w, "not here %d", renders.Add(1))
		}), nil)
		b.get(t, "/nf").check(t, 404, "MISS", "not here 1")
		b.waitStored(t, "/nf", "not here 1")
		r := b.get(t, "/nf", "Range", "bytes=0-1")
		r.check(t, 404, "HIT", "not here 1")
		if got := r.header.Get("Content-Range"); got != "" {
			t.Errorf("Content-Range %q on a 404", got)
		}
	})
}

// TestMiddleware_rangeStale: within stale-while-revalidate, GETs with
// Range (and If-Range), in 2 processes, get their range of the stale
// response (STALE) while the one refresh, which one of them started,
// runs (held), then their range of the refreshed one; the handler never
// sees a Range.
func TestMiddleware_rangeStale(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testContext(t, 20*time.Second)
	g := newRenderGate(ctx, 2)
	var sawRange atomic.Int32
	b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Range") != "" || r.Header.Get("If-Range") != "" {
			sawRange.Add(1)
		}
		n := g.next()
		w.Header().Set("Cache-Control", "max-age=10, stale-while-revalidate=30")
		fmt.Fprintf(w, "body-v%d-end", n)
	}), &bedOptions{procs: 2})
	b.get(t, "/sr").check(t, 200, "MISS", "body-v1-end")
	b.waitStored(t, "/sr", "body-v1-end")
	etag := b.get(t, "/sr", procHeader, "1").header.Get("Etag")
	b.clock.Advance(11 * time.Second)
	b.get(t, "/sr", "Range", "bytes=0-3").check(t, 206, "STALE", "body") // starts the refresh
	redistest.Recv(t, ctx, g.started, "the background render")

	// While it runs, more ranges are served stale at once, in both
	// processes.
	ranges := []struct {
		hdr          []string
		body, crange string
	}{
		{[]string{"Range", "bytes=0-1"}, "bo", "bytes 0-1/11"},
		{[]string{"Range", "bytes=-3"}, "end", "bytes 8-10/11"},
		{[]string{"Range", "bytes=4-"}, "-v1-end", "bytes 4-10/11"},
		{[]string{"Range", "bytes=5-6", "If-Range", etag}, "v1", "bytes 5-6/11"},
	}
	var replies []<-chan sent
	for i, rr := range ranges {
		replies = append(replies, b.goSend(ctx, "GET", "/sr", append(rr.hdr, procHeader, strconv.Itoa(i%2))...))
	}
	for i, ch := range replies {
		r := redistest.Recv(t, ctx, ch, "a stale reply")
		if r.err != nil {
			t.Fatal(r.err)
		}
		r.check(t, 206, "STALE", ranges[i].body)
		if got := r.header.Get("Content-Range"); got != ranges[i].crange {
			t.Errorf("%v: Content-Range %q, want %q", ranges[i].hdr, got, ranges[i].crange)
		}
	}
	if n := g.renders.Load(); n != 2 {
		t.Errorf("renders = %d while refreshing, want 2", n)
	}
	g.open()
	b.waitStored(t, "/sr", "body-v2-end")
	b.get(t, "/sr", "Range", "bytes=5-6", procHeader, "1").check(t, 206, "HIT", "v2")
	if n, saw := g.renders.Load(), sawRange.Load(); n != 2 || saw != 0 {
		t.Errorf("renders = %d, %d of them with Range or If-Range; want 2 without", n, saw)
	}
}

// FuzzRange: for any Range and If-Range a client sends to a stored 200 of
// any length up to 64 bytes, nothing panics and the answer comes from the
// cache and is one of: the whole response (200), exactly the bytes its
// Content-Range names, within the body, with a Content-Length to match
// (206), or a 416 with "bytes */length".
func FuzzRange(f *testing.F) {
	for _, seed := range []struct {
		rng, ifRange string
		n            uint8
	}{
		{"bytes=0-1", "", 11},
		{"bytes=1-", "", 11},
		{"bytes=-1", "", 11},
		{"bytes=-0", "", 11},
		{"bytes=11-", "", 11},
		{"bytes=0-0", "", 0},
		{"bytes=-5", "", 0},
		{"bytes=0-1,2-3", "", 11},
		{"bytes=, 0-1 ,", "", 11},
		{"BYTES = 2-3 ", "", 11},
		{"bytes=3-1", "", 11},
		{"bytes=99999999999999999999999999-", "", 11},
		{"bytes=0-99999999999999999999999999", "", 11},
		{"bytes=-9223372036854775808", "", 11},
		{"bytes=9223372036854775807-9223372036854775807", "", 64},
		{"bytes=--1", "", 11},
		{"bytes=+1-2", "", 11},
		{"items=0-1", "", 11},
		{"bytes=0-1", `"e"`, 11},
		{"bytes=0-1", `W/"e"`, 11},
		{"bytes=0-1", `"`, 11},
		{"bytes=0-1", "Wed, 01 Jan 2020 00:00:00 GMT", 11},
		{"bytes=0-1", "Wed, 01 Jan 2020 00:00:01 GMT", 11},
		{"bytes=20-", `"e"`, 11},
	} {
		f.Add(seed.rng, seed.ifRange, seed.n)
	}
	s := redistest.Shared(f, redistest.Miniredis)
	c, err := cache.New(s.Client(f), &cache.Options{Namespace: "mwfuzzrange" + strings.TrimPrefix(redistest.Key(f, ""), "test:")})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = c.Close() })
	m, err := middleware.New(c, &middleware.Options{Freshness: middleware.FreshnessPolicy{Fresh: 24 * time.Hour}})
	if err != nil {
		f.Fatal(err)
	}
	const maxLen = 64
	full := strings.Repeat("0123456789abcdef", maxLen/16)
	lastModified := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/"))
		w.Header().Set("ETag", `"e"`)
		w.Header().Set("Last-Modified", lastModified.Format(http.TimeFormat))
		fmt.Fprint(w, full[:n])
	}))
	serve := func(path string, hdr ...string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, "http://fuzz.example"+path, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header[hdr[i]] = []string{hdr[i+1]}
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for n := range maxLen + 1 {
		path := "/" + strconv.Itoa(n)
		redistest.WaitFor(f, ctx, "a stored "+path, func() bool { return serve(path).Header().Get("X-Cache") == "HIT" })
	}

	f.Fuzz(func(t *testing.T, rng, ifRange string, n uint8) {
		size := int(n) % (maxLen + 1)
		body := full[:size]
		hdr := []string{"Range", rng}
		if ifRange != "" {
			hdr = append(hdr, "If-Range", ifRange)
		}
		rec := serve("/"+strconv.Itoa(size), hdr...)
		got := rec.Body.String()
		if x := rec.Header().Get("X-Cache"); x != "HIT" {
			t.Fatalf("Range %q If-Range %q on %d bytes: X-Cache %s", rng, ifRange, size, x)
		}
		switch rec.Code {
		case http.StatusOK:
			if got != body {
				t.Errorf("Range %q: 200 with %q, want the whole %q", rng, got, body)
			}
		case http.StatusPartialContent:
			var a, b, total int
			cr := rec.Header().Get("Content-Range")
			if _, err := fmt.Sscanf(cr, "bytes %d-%d/%d", &a, &b, &total); err != nil || cr != fmt.Sprintf("bytes %d-%d/%d", a, b, total) {
				t.Fatalf("Range %q: 206 with Content-Range %q", rng, cr)
			}
			if total != size || a < 0 || a > b || b >= size || got != body[a:b+1] {
				t.Errorf("Range %q on %d bytes: 206 %q with Content-Range %q", rng, size, got, cr)
			}
			if cl := rec.Header().Get("Content-Length"); cl != strconv.Itoa(len(got)) {
				t.Errorf("Range %q: Content-Length %s for %d bytes", rng, cl, len(got))
			}
		case http.StatusRequestedRangeNotSatisfiable:
			if cr := rec.Header().Get("Content-Range"); cr != "bytes */"+strconv.Itoa(size) || got != "" {
				t.Errorf("Range %q on %d bytes: 416 with Content-Range %q and %q", rng, size, cr, got)
			}
		default:
			t.Errorf("Range %q If-Range %q: status %d", rng, ifRange, rec.Code)
		}
	})
}
