package middleware

import (
	"crypto/tls"
	"testing"
)

// TestQuickKey_sameAsParsed: the key of a request whose target is in the
// key's form already, built without parsing (quickKey), is the one
// parsedKey builds, with Keys.Headers, over TLS and with a default port;
// quickKey declines the targets it cannot key as they are.
func TestQuickKey_sameAsParsed(t *testing.T) {
	m := &Middleware{o: Options{Keys: KeyPolicy{IgnoreQuery: []string{"utm_source"}}}, keyHeaders: []string{"X-Forwarded-Proto", "X-Tenant"}}
	tests := []struct {
		name, target, host string
		hdr                []string
		tls, quick         bool
		rewrite            string // r.URL.Path as an outer middleware set it
	}{
		{name: "plain", target: "/report?region=eu&year=2026", host: "example.com", quick: true},
		{name: "no query", target: "/a/b/c", host: "Example.COM:80", quick: true},
		{name: "key headers", target: "/x?id=1", host: "h", hdr: []string{"X-Tenant", " acme\t", "X-Forwarded-Proto", "https"}, quick: true},
		{name: "repeated key header", target: "/x", host: "h", hdr: []string{"X-Tenant", "a", "X-Tenant", "b"}, quick: true},
		{name: "tls", target: "/x~y.z_-?a=~&b=", host: "h:443", tls: true, quick: true},
		{name: "repeated name", target: "/x?a=2&a=1&b=0", host: "h", quick: true},
		{name: "unsorted", target: "/x?b=1&a=2", host: "h"},
		{name: "ignored parameter", target: "/x?utm_source=m", host: "h"},
		{name: "escaped", target: "/x%41?a=%41", host: "h"},
		{name: "plus", target: "/x?a=b+c", host: "h"},
		{name: "no value", target: "/x?a", host: "h"},
		{name: "empty pair", target: "/x?a=1&&b=2", host: "h"},
		{name: "trailing ampersand", target: "/x?a=1&", host: "h"},
		{name: "semicolon", target: "/x?a=1;b=2", host: "h"},
		{name: "path with a colon", target: "/a:b", host: "h"},
		{name: "absolute form", target: "http://h/x", host: "h"},
		{name: "path rewritten", target: "/api/x?a=1", host: "h", rewrite: "/x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, ok := fuzzRequest(tt.target, tt.host)
			if !ok {
				t.Fatalf("%q does not parse", tt.target)
			}
			for i := 0; i+1 < len(tt.hdr); i += 2 {
				r.Header.Add(tt.hdr[i], tt.hdr[i+1])
			}
			if tt.rewrite != "" {
				r.URL.Path = tt.rewrite
			}
			if tt.tls {
				r.TLS = &tls.ConnectionState{}
			}
			want, wantOK := m.parsedKey(r)
			quick, ok := m.quickKey(r)
			if ok != tt.quick {
				t.Errorf("quickKey ok = %v, want %v", ok, tt.quick)
			}
			if ok && (!wantOK || quick != want) {
				t.Errorf("quickKey = %q, parsedKey = %q (%v)", quick, want, wantOK)
			}
			if got, ok := m.baseKey(r); ok != wantOK || got != want {
				t.Errorf("baseKey = %q (%v), parsedKey = %q (%v)", got, ok, want, wantOK)
			}
		})
	}
}
