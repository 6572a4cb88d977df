package middleware

import (
	"bufio"
	"context"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// fuzzRequest parses a request the way net/http's server does, or reports
// that it would not get that far.
func fuzzRequest(target, host string) (*http.Request, bool) {
	if strings.ContainsAny(target, " \r\n") || strings.ContainsAny(host, "\r\n") {
		return nil, false
	}
	r, err := http.ReadRequest(bufio.NewReader(strings.NewReader("GET " + target + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n")))
	if err != nil {
		return nil, false
	}
	return r, true
}

// FuzzBaseKey: the key builder takes any request without panicking;
// requests that differ only in the order of their query parameters (by
// name: the values of a repeated name keep their order), the case of the
// host or a default port share a key; requests that share a key have the
// same path and the same query parameters (minus those not keyed), so one
// cannot be answered with the other's response; no part of a request can
// forge a Vary line; the request the handler renders for the cache has
// the key of the request it was made from and no parameter outside the
// key; and a request seen behind a StripPrefix-like rewrite never shares
// a key with a request sent for the rewritten path. It runs with
// IgnoreQuery and with a Keys.Query allow-list.
func FuzzBaseKey(f *testing.F) {
	for _, seed := range [][3]string{
		{"/a/b?x=1&y=2", "example.com", "/a/b?y=2&x=1"},
		{"/items?utm_source=mail&id=7", "Example.COM:80", "/items?id=7"},
		{"/%7Euser/a%2Fb?q=%zz", "[::1]:8080", "/~user/a/b"},
		{"/caf%C3%A9?q=%E2%9C%93", "xn--caf-dma.example", "/café?q=✓"},
		{"/a?b", "h", "/a%3Fb"},
		{"http://other.example/x?a=1", "example.com", "/x?a=1"},
		{"*", "example.com", "/"},
		{"/?a=1;b=2&&=&a", "h:0080", "/?=&a&a=1"},
		{"/a?x=2&x=1", "h", "/a?x=1&x=2"},
		// Issue 10.
		{"/admin/stats", "h", "/stats"},
		{"/public/stats?id=1&utm_source=x", "h", "/stats?id=1"},
		{"/x?id=2&id=1&utm_source=a", "h", "/x?utm_source=b&id=2&id=1"},
		{"/x?page=1&id=%31&other=2", "h", "/x?id=1&page=1"},
		{"/x?utm_source&id=1&&", "h", "/x?id=1"},
		{"https://h/x?id=1", "h", "/x?id=1"},
		{"/x?%69d=1", "h", "/x?id=1"},
		{"/x%0Avary%20X-User:%20alice", "h", "/x"},
		{"/x?a=%0Avary X-User: alice", "h", "/x?a="},
		// The hostile review of issue 10.
		{"http:first-resource", "example.com", "/"},
		{"http://user:pw@example.com/x", "example.com", "/x"},
		{"/", "[example.com]:80", "/"},
		{"/", "[::1]:80", "/"},
		{"/", "::1:80", "/"},
		// Targets in the key's form already (see quickKey), and near misses.
		{"/x?id=1&page=2", "h", "/x?page=2&id=1"},
		{"/x?id=2&id=1&page=", "h", "/x?id=1&id=2&page="},
		{"/x~y/z.w_-?id=a~b.c", "H:80", "/x~y/z.w_-?id=a~b.c&"},
		{"/x?id=1&", "h", "/x?id"},
		{"/x?id=%31&page=+", "h", "/x?page=%20&id=1"},
		{"//x//?id=1", "h", "/x?id=1"},
		{"/x?=1", "h", "/x?id=1=2"},
	} {
		f.Add(seed[0], seed[1], seed[2])
	}
	ignore := &Middleware{o: Options{Keys: KeyPolicy{IgnoreQuery: []string{"utm_source"}}}}
	allow := &Middleware{o: Options{Keys: KeyPolicy{Query: []string{"id", "page", ""}}}}
	f.Fuzz(func(t *testing.T, target, host, other string) {
		for _, m := range []*Middleware{ignore, allow} {
			checkBaseKey(t, m, target, host, other)
		}
	})
}

func checkBaseKey(t *testing.T, m *Middleware, target, host, other string) {
	r, ok := fuzzRequest(target, host)
	if !ok {
		return
	}
	key, ok := m.baseKey(r)
	if !ok {
		return
	}
	// The key built without parsing, for targets already in the key's
	// form, is the one parsing builds.
	if parsed, ok := m.parsedKey(r); !ok || parsed != key {
		t.Errorf("key %q of %q, %q; parsing makes %q (%v)", key, target, host, parsed, ok)
	}
	first, rest, _ := strings.Cut(key, "\n")
	if strings.HasPrefix(first, "vary ") || rest != "" && !strings.HasPrefix(rest, "url ") || strings.Contains(rest, "\n") {
		// A request (not rewritten, without Keys.Headers) has the first
		// line and, in absolute form, one "url" line: nothing else,
		// and nothing a Vary line could be read from.
		t.Errorf("key %q of %q, %q has unexpected lines", key, target, host)
	}

	// The query's parameters in reverse order, values of a name in
	// their order.
	if i := strings.IndexByte(target, '?'); i >= 0 {
		pairs := strings.Split(target[i+1:], "&")
		names := make([]string, len(pairs))
		for j, p := range pairs {
			n, _, _ := strings.Cut(p, "=")
			if u, err := url.QueryUnescape(n); err == nil {
				n = u
			}
			names[j] = n
		}
		byName := slices.Clone(pairs)
		order := make([]int, len(pairs))
		for j := range order {
			order[j] = j
		}
		// Stable: names sorted backwards, each name's pairs in order.
		slices.SortStableFunc(order, func(a, b int) int { return strings.Compare(names[b], names[a]) })
		for j, o := range order {
			byName[j] = pairs[o]
		}
		if r2, ok := fuzzRequest(target[:i+1]+strings.Join(byName, "&"), host); ok {
			if key2, ok := m.baseKey(r2); !ok || key2 != key {
				t.Errorf("reordered query %q: key %q (%v), want %q", strings.Join(byName, "&"), key2, ok, key)
			}
		}
	}
	// Opaque targets and user information are not keyed: they bypass.
	if r.URL.Opaque != "" || r.URL.User != nil {
		t.Errorf("target %q (opaque %q, user %v) has key %q, want a bypass", target, r.URL.Opaque, r.URL.User, key)
	}
	// The host in square brackets is another host than the handler sees
	// without them.
	if h := r.Host; r.URL.Host == "" && !strings.ContainsAny(h, ":[]") {
		if r2, ok := fuzzRequest(target, "["+h+"]:80"); ok {
			if key2, ok := m.baseKey(r2); ok && key2 == key {
				t.Errorf("host [%s]:80 has the key of host %q: %q", h, h, key)
			}
		}
	}
	// The host in other letter case, with the default port.
	if h := r.Host; r.URL.Host == "" && !strings.ContainsAny(h, ":[]") {
		if r2, ok := fuzzRequest(target, swapCase(h)+":80"); ok {
			if key2, ok := m.baseKey(r2); !ok || key2 != key {
				t.Errorf("host %q: key %q (%v), want %q", swapCase(h)+":80", key2, ok, key)
			}
		}
	}
	// What the handler sees when rendering for the cache.
	rr := r.Clone(context.Background())
	m.prepareRender(rr)
	if key3, ok := m.baseKey(rr); !ok || key3 != key {
		t.Errorf("render request %q: key %q (%v), want %q", rr.RequestURI, key3, ok, key)
	}
	_, sent, _ := strings.Cut(rr.RequestURI, "?")
	for _, raw := range []string{rr.URL.RawQuery, sent} {
		q, _ := url.ParseQuery(raw)
		for name := range q {
			if !m.keyedParam(name) {
				t.Errorf("render request %q keeps %q", rr.RequestURI, name)
			}
		}
	}
	// Behind a rewrite of the path (as http.StripPrefix does).
	if p := r.URL.Path; strings.HasPrefix(p, "/") && strings.Count(p, "/") > 1 {
		stripped := p[strings.Index(p[1:], "/")+1:]
		r2 := new(http.Request)
		*r2 = *r
		r2.URL = new(url.URL)
		*r2.URL = *r.URL
		r2.URL.Path, r2.URL.RawPath = stripped, ""
		key2, ok := m.baseKey(r2)
		if direct, okD := fuzzRequest(r2.URL.RequestURI(), host); ok && okD && r2.URL.Host == "" {
			if key3, ok := m.baseKey(direct); ok && key3 == key2 {
				t.Errorf("%q rewritten to %q shares the key %q with a request for %q", target, stripped, key2, direct.RequestURI)
			}
		}
	}
	// Another request with the same key asks for the same thing.
	r2, ok := fuzzRequest(other, host)
	if !ok {
		return
	}
	if key2, ok := m.baseKey(r2); ok && key2 == key {
		if r.URL.Path != r2.URL.Path || !sameQuery(m, r.URL.RawQuery, r2.URL.RawQuery) {
			t.Errorf("%q and %q share the key %q", target, other, key)
		}
	}
}

// swapCase swaps the case of ASCII letters.
func swapCase(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case 'a' <= c && c <= 'z':
			b[i] = c - 'a' + 'A'
		case 'A' <= c && c <= 'Z':
			b[i] = c - 'A' + 'a'
		}
	}
	return string(b)
}

// sameQuery reports whether two queries hold the same keyed parameters,
// each with the same values in the same order.
func sameQuery(m *Middleware, a, b string) bool {
	qa, _ := url.ParseQuery(a)
	qb, _ := url.ParseQuery(b)
	for name := range qa {
		if !m.keyedParam(name) {
			delete(qa, name)
		}
	}
	for name := range qb {
		if !m.keyedParam(name) {
			delete(qb, name)
		}
	}
	if len(qa) != len(qb) {
		return false
	}
	for name, va := range qa {
		if vb, ok := qb[name]; !ok || !slices.Equal(va, vb) {
			return false
		}
	}
	return true
}

// FuzzHeaderValue: two lists of a field's lines (a "\n" in a and b
// separates lines) give one keyed value exactly when their lines, trimmed
// of spaces and tabs, are the same, no lines being one empty line (as
// Header.Get sees them); and a key with that field (Keys.Headers) has no
// line a Vary line could be read from.
func FuzzHeaderValue(f *testing.F) {
	const ua = "Mozilla/5.0 (Linux; Android 14) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Mobile Safari/537.36"
	for _, seed := range [][2]string{
		{"A\nB", "A, B"},
		{ua[:strings.Index(ua, ", ")] + "\n" + ua[strings.Index(ua, ", ")+2:], ua},
		{"A\n", "A"},
		{"", "\n"},
		{" A \t", "A"},
		{`"A" "B"`, "A\nB"},
		{` "A" "B"`, "A\nB"},
		{"A\x00B", "A\nB"},
		{"a\rvary X-User: alice", "a\nvary X-User: alice"},
		{"\u00a0A", "A\u0085"},
	} {
		f.Add(seed[0], seed[1])
	}
	m := &Middleware{keyHeaders: []string{"X-Field"}}
	lines := func(s string) []string {
		ls := strings.Split(s, "\n")
		for i, l := range ls {
			ls[i] = strings.Trim(l, " \t")
		}
		if len(ls) == 1 && ls[0] == "" {
			return nil
		}
		return ls
	}
	header := func(s string) http.Header { return http.Header{"X-Field": strings.Split(s, "\n")} }
	f.Fuzz(func(t *testing.T, a, b string) {
		va, vb := headerValue(header(a), "X-Field"), headerValue(header(b), "X-Field")
		if same := slices.Equal(lines(a), lines(b)); same != (va == vb) {
			t.Errorf("lines %q and %q: values %q and %q (same lines: %v)", lines(a), lines(b), va, vb, same)
		}
		var k strings.Builder
		m.writeKeyHeaders(&k, &http.Request{Header: header(a)})
		if strings.Count(k.String(), "\n") != 1 {
			t.Errorf("lines %q make the key lines %q", lines(a), k.String())
		}
	})
}

// FuzzSoftPurgeAsked: a PURGE asks for a soft purge only with exactly
// one Fastly-Soft-Purge field line "1"; it is refused whenever any line
// is not exactly "0" or "1", or there are several: every field line is
// read, none is skipped.
func FuzzSoftPurgeAsked(f *testing.F) {
	f.Add(1, "1", "")
	f.Add(1, "0", "")
	f.Add(2, "1", "1")
	f.Add(2, "1", "0")
	f.Add(1, "", "")
	f.Add(1, " 1", "")
	f.Add(1, "true", "")
	f.Add(0, "", "")
	f.Fuzz(func(t *testing.T, lines int, a, b string) {
		h := http.Header{}
		switch {
		case lines == 1:
			h[softPurgeField] = []string{a}
		case lines >= 2:
			h[softPurgeField] = []string{a, b}
		}
		soft, why := softPurgeAsked(h)
		vs := h[softPurgeField]
		wantOK := len(vs) == 0 || len(vs) == 1 && (vs[0] == "0" || vs[0] == "1")
		if (why == "") != wantOK {
			t.Errorf("field lines %q: refused %q, want refused: %v", vs, why, !wantOK)
		}
		if soft != (len(vs) == 1 && vs[0] == "1") {
			t.Errorf("field lines %q: soft %v", vs, soft)
		}
	})
}
