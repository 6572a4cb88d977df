package middleware_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/redistest"
	"github.com/hotkv/stampede/lock"
	"github.com/hotkv/stampede/middleware"
)

// This file feeds the middleware what it should refuse or survive: bad
// options, malformed Cache-Control from handlers, and odd URLs.

func badInputCache(tb testing.TB) *cache.Cache {
	tb.Helper()
	s := redistest.Shared(tb, redistest.Redis8)
	c, err := cache.New(s.Client(tb), &cache.Options{Namespace: "mw" + strings.TrimPrefix(redistest.Key(tb, ""), "test:")})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// wantProblem fails tb unless err carries the package prefix and names
// the problem.
func wantProblem(tb testing.TB, err error, text string) {
	tb.Helper()
	switch {
	case err == nil:
		tb.Errorf("err = nil, want one naming %q", text)
	case !strings.HasPrefix(err.Error(), "middleware: "):
		tb.Errorf("err = %q, want the middleware: prefix", err)
	case !strings.Contains(err.Error(), text):
		tb.Errorf("err = %q, want it to name the problem: %q", err, text)
	case !errors.Is(err, middleware.ErrInvalid) || !errors.Is(err, lock.ErrInvalid) || !errors.Is(err, cache.ErrInvalid):
		tb.Errorf("err = %q, want it to match ErrInvalid of middleware, cache and lock", err)
	}
}

func TestNew_badOptions(t *testing.T) {
	c := badInputCache(t)
	tests := []struct {
		name string
		opts middleware.Options
		text string
	}{
		{"negative TTL", middleware.Options{TTL: -time.Second}, "TTL -1s is negative"},
		{"TTL below 1ms", middleware.Options{TTL: time.Microsecond}, "TTL 1µs is below 1ms"},
		{"negative StaleTTL", middleware.Options{StaleTTL: -time.Minute}, "StaleTTL -1m0s is negative"},
		{"negative StoreLimit", middleware.Options{StoreLimit: -1}, "StoreLimit -1 is negative"},
		{"negative WaitTimeout", middleware.Options{WaitTimeout: -time.Second}, "WaitTimeout -1s is negative"},
		{"WaitTimeout below 1ms", middleware.Options{WaitTimeout: time.Nanosecond}, "WaitTimeout 1ns is below 1ms"},
		{"503 in Statuses", middleware.Options{Statuses: []int{200, 503}}, "status 503 in Statuses: server errors are never stored"},
		{"500 in Statuses", middleware.Options{Statuses: []int{500}}, "status 500 in Statuses: server errors are never stored"},
		{"99 in Statuses", middleware.Options{Statuses: []int{99}}, "status 99 in Statuses is not a final status"},
		{"100 in Statuses", middleware.Options{Statuses: []int{200, 100}}, "status 100 in Statuses is not a final status"},
		{"600 in Statuses", middleware.Options{Statuses: []int{600}}, "status 600 in Statuses is not a final status"},
		{"negative status", middleware.Options{Statuses: []int{-200}}, "status -200 in Statuses is not a final status"},
		{"empty KeyHeaders entry", middleware.Options{KeyHeaders: []string{"X-Forwarded-Proto", ""}}, "empty name in KeyHeaders"},
		{"empty IgnoreQuery entry", middleware.Options{IgnoreQuery: []string{""}}, "empty name in KeyHeaders or IgnoreQuery"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := tt.opts
			m, err := middleware.New(c, &opts)
			wantProblem(t, err, tt.text)
			if m != nil {
				t.Errorf("New returned a Middleware with the error")
			}
		})
	}
	t.Run("nil cache", func(t *testing.T) {
		var nilCache *cache.Cache
		m, err := middleware.New(nilCache, nil)
		wantProblem(t, err, "nil *cache.Cache")
		if m != nil {
			t.Errorf("New returned a Middleware with the error")
		}
	})
	t.Run("the options are not modified", func(t *testing.T) {
		opts := middleware.Options{KeyHeaders: []string{"x-forwarded-proto"}}
		if _, err := middleware.New(c, &opts); err != nil {
			t.Fatal(err)
		}
		if opts.TTL != 0 || opts.StatusHeader != "" || opts.KeyHeaders[0] != "x-forwarded-proto" {
			t.Errorf("New changed the caller's Options: %+v", opts)
		}
	})
	for _, opts := range []*middleware.Options{nil, {}, {TTL: time.Millisecond, WaitTimeout: time.Millisecond, Statuses: []int{200, 404, 501}}} {
		if _, err := middleware.New(c, opts); err != nil {
			t.Errorf("New(%+v) = %v", opts, err)
		}
	}
}

func TestCache_panicsOnBadConfig(t *testing.T) {
	c := badInputCache(t)
	tests := []struct {
		name string
		c    *cache.Cache
		ttl  time.Duration
		text string
	}{
		{"negative ttl", c, -time.Second, "middleware: invalid argument: TTL -1s is negative"},
		{"ttl below 1ms", c, 10 * time.Microsecond, "middleware: invalid argument: TTL 10µs is below 1ms"},
		{"nil cache", nil, time.Minute, "middleware: invalid argument: nil *cache.Cache"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				v := recover()
				err, ok := v.(error)
				if !ok || err.Error() != tt.text || !errors.Is(err, middleware.ErrInvalid) {
					t.Errorf("panic value %#v, want an error %q", v, tt.text)
				}
			}()
			middleware.Cache(tt.c, tt.ttl)
			t.Error("Cache did not panic")
		})
	}
	if mw := middleware.Cache(c, 0); mw == nil { // zero: the default TTL
		t.Error("Cache(c, 0) = nil")
	}
}

// TestMiddleware_malformedCacheControl: whatever a handler puts in
// Cache-Control, nothing panics, and the response is either not stored
// (what cannot be read is treated conservatively) or stored for a sane
// time.
func TestMiddleware_malformedCacheControl(t *testing.T) {
	const max = time.Duration(1<<31) * time.Second // RFC 9111 1.2.2
	tests := []struct {
		name   string
		cc     []string
		stored time.Duration // the server TTL; 0: not stored
	}{
		{"non-numbers", []string{"max-age=abc, s-maxage="}, 0},
		{"no value", []string{"max-age"}, 0},
		{"empty value", []string{"s-maxage="}, 0},
		{"negative", []string{"max-age=-5"}, 0},
		{"beyond int64", []string{"max-age=99999999999999999999"}, 0},
		{"beyond 2^31", []string{"max-age=9999999999"}, max},
		{"stale window beyond 2^31", []string{"max-age=10, stale-while-revalidate=99999999999"}, 10*time.Second + max},
		{"bad stale window", []string{"max-age=10, stale-if-error=soon"}, 0},
		{"unbalanced quote swallows private", []string{`max-age="60, private`}, 0},
		{"unbalanced quote after private", []string{`private, max-age="60`}, 0},
		{"unbalanced quote in an unknown directive", []string{`max-age=60, x="unterminated, no-store`}, 60 * time.Second},
		{"escaped quote", []string{`max-age=60, x="a\"b,c", y`}, 60 * time.Second},
		{"trailing backslash", []string{`max-age=60, x="\`}, 60 * time.Second},
		{"first max-age wins", []string{"max-age=60, max-age=0"}, 60 * time.Second},
		{"empty directives", []string{",,, max-age=30 ,, ,"}, 30 * time.Second},
		{"spaces around =", []string{"max-age = 30"}, 30 * time.Second},
		{"two fields", []string{"max-age=30", "no-store"}, 0},
		{"two fields, s-maxage in the second", []string{"max-age=30", "s-maxage=40"}, 40 * time.Second},
		{"unknown directives only", []string{"foo, bar=baz, =, ==, \"\""}, time.Minute},
		{"thousands of directives", []string{strings.Repeat("x-a=1, ", 5000) + "max-age=20"}, 20 * time.Second},
		{"obs-text", []string{"max-age=\xff, \xfe"}, 0},
	}
	s := redistest.Shared(t, redistest.Redis8)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var renders atomic.Int32
			b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for _, v := range tt.cc {
					w.Header().Add("Cache-Control", v)
				}
				fmt.Fprintf(w, "r%d", renders.Add(1))
			}), nil)
			if tt.stored == 0 {
				b.get(t, "/mcc").check(t, 200, "BYPASS", "r1")
				b.get(t, "/mcc").check(t, 200, "BYPASS", "r2")
				b.waitGone(t, "/mcc")
				return
			}
			b.get(t, "/mcc").check(t, 200, "MISS", "r1")
			b.waitStored(t, "/mcc", "r1")
			if got := b.ttl(t, "/mcc"); got > tt.stored || got < tt.stored-5*time.Second {
				t.Errorf("server TTL = %v, want %v", got, tt.stored)
			}
			b.get(t, "/mcc").check(t, 200, "HIT", "r1")
		})
	}
}

// TestMiddleware_hugeStaleTTL: the largest durations the options accept
// do not overflow into a broken entry.
func TestMiddleware_hugeStaleTTL(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	var renders atomic.Int32
	b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "r%d", renders.Add(1))
	}), &bedOptions{mw: &middleware.Options{TTL: math.MaxInt64 / 2, StaleTTL: math.MaxInt64}})
	b.get(t, "/huge").check(t, 200, "MISS", "r1")
	b.get(t, "/huge").check(t, 200, "HIT", "r1")
	b.waitStored(t, "/huge", "r1")
	// The cache caps an entry's life at 100 years ("forever").
	if got := b.ttl(t, "/huge"); got < 99*365*24*time.Hour {
		t.Errorf("server TTL = %v, want the cache's cap of 100 years", got)
	}
}

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
