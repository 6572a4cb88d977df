package middleware_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/redistest"
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
