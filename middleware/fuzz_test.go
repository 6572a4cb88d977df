package middleware_test

import (
	"bufio"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/redistest"
	"github.com/hotkv/stampede/middleware"
)

// The unexported parts (the Cache-Control parser, the key builder) are
// fuzzed in fuzz_internal_test.go; this target goes through the public
// API, with a real cache on miniredis (in-process, so each input takes
// about a millisecond).

// fuzzRequest parses a GET for target with a Host and an X-User header
// the way net/http's server does, or reports that it would not get that
// far.
func fuzzRequest(target, host, user string) (*http.Request, bool) {
	if strings.ContainsAny(target, " \r\n") || strings.ContainsAny(user, "\r\n") {
		return nil, false
	}
	raw := "GET " + target + " HTTP/1.1\r\nHost: " + host + "\r\nX-User: " + user + "\r\n\r\n"
	r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
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

// FuzzMiddleware: for any request target, any Cache-Control and Vary from
// the handler and any two users asking for the same URL one after the
// other, nothing panics, each response was rendered for the URL asked
// for, the first user's for the first user, and the second user gets the
// first one's response only when it does not vary on X-User.
func FuzzMiddleware(f *testing.F) {
	for _, seed := range []struct{ target, cc, vary, a, b string }{
		{"/a?x=1&y=2", "max-age=60", "X-User", "alice", "bob"},
		{"/a?y=2&x=1", "", "", "alice", "bob"},
		{"/p", "private", "", "alice", "bob"},
		{"/v", "max-age=60", "accept-encoding, x-user", "alice", "alice"},
		{"/v", "s-maxage=10, stale-while-revalidate=5", "*", "", "bob"},
		{"/q?a=%zz", "max-age=60", "", "a", "b"},
		{"/%7E/caf%C3%A9", `max-age="60, private`, "X-User,", "\u00a0alice", "alice"},
		{"/x", "max-age=99999999999999999999", "X-User", "alice ", " alice"},
		{"/n", "no-cache, max-age=60", "x-user", "a, b", "a"},
	} {
		f.Add(seed.target, seed.cc, seed.vary, seed.a, seed.b)
	}
	s := redistest.Shared(f, redistest.Miniredis)
	c, err := cache.New(s.Client(f), &cache.Options{Namespace: "mwfuzz" + strings.TrimPrefix(redistest.Key(f, ""), "test:")})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = c.Close() })
	var inputs atomic.Int64

	f.Fuzz(func(t *testing.T, target, cc, vary, userA, userB string) {
		if strings.ContainsAny(cc+vary, "\r\n") {
			return // net/http would not send these headers as they are
		}
		host := fmt.Sprintf("in%d.fuzz.example", inputs.Add(1)) // keys of its own
		reqA, okA := fuzzRequest(target, host, userA)
		reqB, okB := fuzzRequest(target, host, userB)
		if !okA || !okB {
			return
		}
		m, err := middleware.New(c, &middleware.Options{StoreLimit: 1 << 16})
		if err != nil {
			t.Fatal(err)
		}
		var renders atomic.Int32
		h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if cc != "" {
				w.Header().Set("Cache-Control", cc)
			}
			if vary != "" {
				w.Header().Set("Vary", vary)
			}
			fmt.Fprintf(w, "path=%s user=%s n=%d", r.URL.EscapedPath(), r.Header.Get("X-User"), renders.Add(1))
		}))
		serve := func(r *http.Request) string {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			if rec.Code != http.StatusOK && rec.Code != http.StatusNotModified {
				t.Fatalf("status %d for %q", rec.Code, target)
			}
			return rec.Body.String()
		}
		for _, r := range []*http.Request{reqA, reqB} {
			body := serve(r)
			want := fmt.Sprintf("path=%s user=", r.URL.EscapedPath())
			if r == reqA || variesOn(vary, "X-User") {
				want += r.Header.Get("X-User") + " n="
			}
			if !strings.HasPrefix(body, want) {
				t.Errorf("GET %q by %q (Cache-Control %q, Vary %q): got %q, want %q...", target, r.Header.Get("X-User"), cc, vary, body, want)
			}
		}
	})
}
