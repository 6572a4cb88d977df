package middleware_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/redistest"
)

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
