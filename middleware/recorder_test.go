package middleware_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/middleware"
)

// TestMiddleware_streamsLargeBody: a body far beyond StoreLimit reaches the
// client whole and in order, with the heap staying far below its size, and
// is not stored.
func TestMiddleware_streamsLargeBody(t *testing.T) {
	const (
		chunk = 32 << 10
		total = 64 << 20
	)
	var patterns [8][]byte
	for i := range patterns {
		patterns[i] = bytes.Repeat([]byte{byte('a' + i)}, chunk)
	}
	s := redistest.Shared(t, redistest.Redis8)
	var renders atomic.Int32
	b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		renders.Add(1)
		buf := make([]byte, chunk)
		for i := range total / chunk {
			copy(buf, patterns[i%len(patterns)])
			binary.BigEndian.PutUint64(buf, uint64(i))
			if _, err := w.Write(buf); err != nil {
				return
			}
		}
	}), &bedOptions{mw: &middleware.Options{StoreLimit: 1 << 20}})

	for round := 1; round <= 2; round++ {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		base, peak := ms.HeapInuse, ms.HeapInuse

		req, err := http.NewRequestWithContext(testContext(t, time.Minute), "GET", b.srv.URL+"/big", nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := b.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if got := res.Header.Get("X-Cache"); got != "BYPASS" {
			t.Errorf("round %d: X-Cache = %q, want BYPASS", round, got)
		}
		buf := make([]byte, chunk)
		for i := range total / chunk {
			if _, err := io.ReadFull(res.Body, buf); err != nil {
				t.Fatalf("round %d: chunk %d: %v", round, i, err)
			}
			if got := binary.BigEndian.Uint64(buf); got != uint64(i) || !bytes.Equal(buf[8:], patterns[i%len(patterns)][8:]) {
				t.Fatalf("round %d: chunk %d is wrong (numbered %d)", round, i, got)
			}
			if i%64 == 0 {
				runtime.ReadMemStats(&ms)
				peak = max(peak, ms.HeapInuse)
			}
		}
		if n, err := io.Copy(io.Discard, res.Body); n != 0 || err != nil {
			t.Errorf("round %d: %d bytes past the end, err %v", round, n, err)
		}
		res.Body.Close()
		if grew := int64(peak) - int64(base); grew > 16<<20 {
			t.Errorf("round %d: heap in use grew by %d MiB while streaming %d MiB", round, grew>>20, total>>20)
		}
	}
	if n := renders.Load(); n != 2 {
		t.Errorf("renders = %d, want 2 (nothing stored)", n)
	}
	b.waitGone(t, "/big")
}

func TestMiddleware_storeLimitBoundary(t *testing.T) {
	const limit = 4096
	s := redistest.Shared(t, redistest.Redis8)
	tests := []struct {
		name   string
		size   int
		stored bool
	}{
		{"at the limit", limit, true},
		{"one byte over", limit + 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var renders atomic.Int32
			b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body := bytes.Repeat([]byte{'0' + byte(renders.Add(1))}, tt.size)
				for len(body) > 0 { // in uneven writes
					n := min(len(body), 1000)
					_, _ = w.Write(body[:n])
					body = body[n:]
				}
			}), &bedOptions{mw: &middleware.Options{StoreLimit: limit}})
			one, two := strings.Repeat("1", tt.size), strings.Repeat("2", tt.size)
			if tt.stored {
				b.get(t, "/s").check(t, 200, "MISS", one)
				b.get(t, "/s").check(t, 200, "HIT", one)
			} else {
				b.get(t, "/s").check(t, 200, "BYPASS", one)
				b.get(t, "/s").check(t, 200, "BYPASS", two)
			}
		})
	}
}

// TestMiddleware_flushStored: a flush is a hint about latency, not a
// refusal to be stored (issue 39): a handler that writes a chunk, flushes
// and writes another, without Content-Length (chunked, as
// httputil.ReverseProxy flushes it), with max-age, is stored whole.
func TestMiddleware_flushStored(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	var renders atomic.Int32
	b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		fmt.Fprintf(w, "first-%d;", renders.Add(1))
		if err := http.NewResponseController(w).Flush(); err != nil {
			panic(err)
		}
		fmt.Fprint(w, "second")
	}), nil)
	b.get(t, "/fs").check(t, 200, "MISS", "first-1;second")
	b.get(t, "/fs").check(t, 200, "HIT", "first-1;second")
	if n := renders.Load(); n != 1 {
		t.Errorf("%d renders, want 1", n)
	}
}

// TestMiddleware_flush_buffered: a render that flushes a response that
// may be stored sends nothing before it ends (the flush is a latency
// hint); then its client and the request that waited for it get the whole
// body, and it is stored.
func TestMiddleware_flush_buffered(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testContext(t, 20*time.Second)
	var renders atomic.Int32
	flushed, release := make(chan struct{}), make(chan struct{})
	b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := renders.Add(1)
		w.Header().Set("Cache-Control", "max-age=60")
		fmt.Fprintf(w, "first-%d;", n)
		if err := http.NewResponseController(w).Flush(); err != nil {
			panic(err)
		}
		if n == 1 {
			close(flushed)
			block(ctx, release)
		}
		fmt.Fprint(w, "second")
	}), nil)
	first := b.goSend(ctx, "GET", "/fb")
	redistest.Recv(t, ctx, flushed, "the render to flush")
	waiter := b.goSend(ctx, "GET", "/fb")
	redistest.WaitFor(t, ctx, "the second request to wait for the render", func() bool { return b.stats().Misses == 2 })
	select {
	case r := <-first:
		t.Fatalf("the render's client got %v before the render ended", r.reply)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	for _, w := range []struct {
		ch     <-chan sent
		xcache string
	}{{first, "MISS"}, {waiter, "HIT"}} {
		r := redistest.Recv(t, ctx, w.ch, "a reply")
		if r.err != nil {
			t.Fatal(r.err)
		}
		r.check(t, 200, w.xcache, "first-1;second")
	}
	b.get(t, "/fb").check(t, 200, "HIT", "first-1;second")
	if n := renders.Load(); n != 1 {
		t.Errorf("%d renders, want 1", n)
	}
}

// TestMiddleware_flush_overLimit: a response that flushes and then
// outgrows StoreLimit passes through from there, as one that does not
// flush, and is not stored; its client gets all of it.
func TestMiddleware_flush_overLimit(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	const limit = 4 << 10
	var renders atomic.Int32
	b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		chunk := bytes.Repeat([]byte{'0' + byte(renders.Add(1))}, 1000)
		for range 6 {
			_, _ = w.Write(chunk)
			if err := http.NewResponseController(w).Flush(); err != nil {
				panic(err)
			}
		}
	}), &bedOptions{mw: &middleware.Options{StoreLimit: limit}})
	b.get(t, "/fl").check(t, 200, "BYPASS", strings.Repeat("1", 6000))
	b.get(t, "/fl").check(t, 200, "BYPASS", strings.Repeat("2", 6000))
}

// TestMiddleware_flush_streams: a handler that flushes a response that
// cannot be stored anyway (an event stream, whatever it says of caching,
// or one the storage rules refuse by its status or header) streams to its
// client before it returns, is not stored, and a request waiting for its
// render renders for itself.
func TestMiddleware_flush_streams(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	for _, tt := range []struct {
		name   string
		status int
		header http.Header
	}{
		{"event stream", 200, http.Header{"Content-Type": {"text/event-stream"}}},
		{"event stream with max-age, in another case", 200, http.Header{"content-type": {"Text/Event-Stream; charset=utf-8"}, "Cache-Control": {"max-age=60"}}},
		{"no-store", 200, http.Header{"Cache-Control": {"no-store"}}},
		{"private", 200, http.Header{"Cache-Control": {"private, max-age=60"}}},
		{"no-cache", 200, http.Header{"Cache-Control": {"no-cache"}}},
		{"cookie", 200, http.Header{"Cache-Control": {"max-age=60"}, "Set-Cookie": {"a=b"}}},
		{"Vary: *", 200, http.Header{"Cache-Control": {"max-age=60"}, "Vary": {"*"}}},
		{"status not storable", 201, http.Header{"Cache-Control": {"max-age=60"}}},
		{"max-age=0", 200, http.Header{"Cache-Control": {"max-age=0"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testContext(t, 20*time.Second)
			var renders atomic.Int32
			release := make(chan struct{})
			b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := renders.Add(1)
				for k, vs := range tt.header {
					w.Header()[k] = vs
				}
				w.WriteHeader(tt.status)
				fmt.Fprintf(w, "first-%d;", n)
				if err := http.NewResponseController(w).Flush(); err != nil {
					panic(err)
				}
				if n == 1 {
					block(ctx, release)
				}
				fmt.Fprint(w, "second")
			}), nil)

			req, err := http.NewRequestWithContext(ctx, "GET", b.srv.URL+"/f", nil)
			if err != nil {
				t.Fatal(err)
			}
			res, err := b.client.Do(req) // returns once the headers are flushed
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			if got := res.Header.Get("X-Cache"); got != "BYPASS" || res.StatusCode != tt.status {
				t.Errorf("status %d, X-Cache = %q; want %d, BYPASS", res.StatusCode, got, tt.status)
			}
			head := make([]byte, len("first-1;"))
			if _, err := io.ReadFull(res.Body, head); err != nil || string(head) != "first-1;" {
				t.Fatalf("read %q, %v before the handler returned", head, err)
			}
			waiter := b.goSend(ctx, "GET", "/f")
			redistest.WaitFor(t, ctx, "the second request to wait for the render", func() bool { return b.stats().Misses == 2 })
			close(release)
			rest, err := io.ReadAll(res.Body)
			if err != nil || string(rest) != "second" {
				t.Errorf("rest = %q, %v", rest, err)
			}
			w := redistest.Recv(t, ctx, waiter, "the waiter")
			if w.err != nil {
				t.Fatal(w.err)
			}
			w.check(t, tt.status, "BYPASS", "first-2;second")
			b.get(t, "/f").check(t, tt.status, "BYPASS", "first-3;second")
			b.waitGone(t, "/f")
		})
	}
}

func TestMiddleware_hijack(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	var renders atomic.Int32
	b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := fmt.Sprintf("hijacked-%d", renders.Add(1))
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			http.Error(w, err.Error(), http.StatusTeapot)
			return
		}
		defer conn.Close()
		fmt.Fprintf(rw, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
		_ = rw.Flush()
	}), nil)
	for i := 1; i <= 2; i++ {
		r := b.get(t, "/hj")
		if r.status != 200 || r.body != fmt.Sprintf("hijacked-%d", i) || r.header.Get("X-Cache") != "" {
			t.Errorf("request %d: %v", i, r)
		}
	}
	b.waitGone(t, "/hj")
}

// TestMiddleware_earlyHints: a 103 Early Hints the handler sends while it
// renders for the cache reaches the client with its Link fields (before,
// it went out bare), as httputil.ReverseProxy and handlers send it: the
// fields set, WriteHeader(103), the fields cleared. Its fields are no
// part of the final response, stored or served.
func TestMiddleware_earlyHints(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	var renders atomic.Int32
	b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload; as=style")
		w.Header().Set("X-Hint-Only", "1")
		w.WriteHeader(http.StatusEarlyHints)
		clear(w.Header())
		w.Header().Set("Cache-Control", "max-age=60")
		fmt.Fprintf(w, "n=%d", renders.Add(1))
	}), nil)
	get := func() (interim []textproto.MIMEHeader, final *http.Response, body string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
			Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
				if code == http.StatusEarlyHints {
					interim = append(interim, h)
				}
				return nil
			},
		})
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.srv.URL+"/eh", nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := b.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		raw, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		return interim, res, string(raw)
	}
	interim, res, body := get()
	if len(interim) != 1 || interim[0].Get("Link") != "</style.css>; rel=preload; as=style" || interim[0].Get("X-Hint-Only") != "1" {
		t.Errorf("103 responses %v, want one with the handler's Link and X-Hint-Only", interim)
	}
	if res.Header.Get("X-Cache") != "MISS" || body != "n=1" || res.Header.Get("Link") != "" || res.Header.Get("X-Hint-Only") != "" {
		t.Errorf("final response %s %q with header %v, want MISS n=1 without the 103's fields", res.Header.Get("X-Cache"), body, res.Header)
	}
	b.waitStored(t, "/eh", "n=1")
	if raw := b.storedText(t, "/eh"); strings.Contains(raw, "style.css") || strings.Contains(raw, "X-Hint-Only") {
		t.Errorf("the stored response holds the 103's fields: %q", raw)
	}
	interim, res, body = get()
	if len(interim) != 0 || res.Header.Get("X-Cache") != "HIT" || body != "n=1" || res.Header.Get("Link") != "" {
		t.Errorf("hit: 103s %v, %s %q with header %v", interim, res.Header.Get("X-Cache"), body, res.Header)
	}
}
