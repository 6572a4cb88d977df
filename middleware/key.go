package middleware

import (
	"net"
	"net/http"
	"net/url"
	"sort"
	"strings"
)

// baseKey is the part of the cache key that every request for a resource
// shares: the method class, scheme, host, path and the normalised query.
//
//	"GET https://example.com/items?a=1&b=2&b=3"
//
// GET and HEAD share entries (a HEAD is answered from the GET's). The
// scheme comes from the connection (r.TLS), never from a header; the host
// is lower-cased without a default port; the path is the escaped path as
// sent; query parameters are sorted by name and then value, with the
// ignored ones removed. ok is false for a query that does not parse: such
// requests bypass the cache.
func (m *Middleware) baseKey(r *http.Request) (key string, ok bool) {
	if m.o.KeyFunc != nil {
		return m.o.KeyFunc(r)
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	host := strings.ToLower(r.Host)
	if h, port, err := net.SplitHostPort(host); err == nil &&
		(scheme == "http" && port == "80" || scheme == "https" && port == "443") {
		host = h
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return "", false
	}
	for _, name := range m.o.IgnoreQuery {
		q.Del(name)
	}
	var b strings.Builder
	b.WriteString("GET ")
	b.WriteString(scheme)
	b.WriteString("://")
	b.WriteString(host)
	b.WriteString(r.URL.EscapedPath())
	if len(q) > 0 {
		b.WriteByte('?')
		b.WriteString(sortedQuery(q))
	}
	for _, h := range m.keyHeaders {
		b.WriteString("\n")
		b.WriteString(h)
		b.WriteString(": ")
		b.WriteString(headerValue(r.Header, h))
	}
	return b.String(), true
}

func sortedQuery(q url.Values) string {
	names := make([]string, 0, len(q))
	for n := range q {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		vs := append([]string(nil), q[n]...)
		sort.Strings(vs)
		for _, v := range vs {
			if b.Len() > 0 {
				b.WriteByte('&')
			}
			b.WriteString(url.QueryEscape(n))
			b.WriteByte('=')
			b.WriteString(url.QueryEscape(v))
		}
	}
	return b.String()
}

// headerValue is a request header's values as one comparable string. It
// trims only what HTTP treats as whitespace around a value (spaces and
// tabs): other bytes are part of the value the handler sees, so they must
// be part of the key. It must not modify h (Values returns h's own slice).
func headerValue(h http.Header, name string) string {
	var b strings.Builder
	for i, v := range h.Values(name) {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strings.Trim(v, " \t"))
	}
	return b.String()
}

// variantKey extends base with the request's values of the headers a
// response for base said it varies on.
func variantKey(base string, vary []string, r *http.Request) string {
	if len(vary) == 0 {
		return base
	}
	var b strings.Builder
	b.WriteString(base)
	for _, name := range vary {
		b.WriteString("\nvary ")
		b.WriteString(name)
		b.WriteString(": ")
		b.WriteString(headerValue(r.Header, name))
	}
	return b.String()
}

// parseVary returns the canonical header names of a response's Vary
// fields, sorted and without duplicates; star reports "Vary: *".
func parseVary(h http.Header) (names []string, star bool) {
	seen := map[string]bool{}
	for _, v := range h.Values("Vary") {
		for _, n := range strings.Split(v, ",") {
			n = strings.TrimSpace(n)
			if n == "" {
				continue
			}
			if n == "*" {
				return nil, true
			}
			n = http.CanonicalHeaderKey(n)
			if !seen[n] {
				seen[n] = true
				names = append(names, n)
			}
		}
	}
	sort.Strings(names)
	return names, false
}

// unkeyedHeaders lists request headers that frameworks and proxies use to
// rewrite URLs, hosts, schemes and methods. A response shaped by one of
// them must not be stored for requests without it, so they are removed
// from the request the handler sees when rendering for the cache, unless
// Options.KeyHeaders puts them in the key.
func unkeyedHeaders() []string {
	return []string{
		"Forwarded", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Forwarded-Scheme", "X-Forwarded-Port",
		"X-Forwarded-Prefix", "X-Forwarded-Server", "X-Host", "X-Original-Host", "X-Original-Url", "X-Rewrite-Url",
		"X-Http-Method-Override", "X-Http-Method", "X-Method-Override",
	}
}
