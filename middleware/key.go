package middleware

import (
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// baseKey is the part of the cache key that every request for a resource
// shares: the method class, scheme, host, path and the normalised query
// of the request as received.
//
//	"GET https://example.com/items?a=1&b=2&b=3"
//
// GET and HEAD share entries (a HEAD is answered from the GET's). The
// scheme comes from the connection (r.TLS), never from a header; the host
// is lower-cased without a default port. The path and query are those the
// client sent (r.RequestURI; r.URL when RequestURI is empty, as in a
// request built by a client): a handler mounted behind http.StripPrefix
// or another rewrite sees a shorter path, but requests that reached it by
// different URLs must not share entries. The path is the escaped path as
// sent; query parameters are sorted by name, the values of a repeated name
// keep their order, and the parameters IgnoreQuery names (or Keys.Query does
// not) are left out. Lines follow for what an outer middleware changed
// and the handler can see:
//
//	"\nurl https://internal.example" r.URL.Scheme, r.URL.Host, if set
//	"\nrewritten /items?a=1"         r.URL's path and query, if not those received
//
// then one line per Keys.Headers name. ok is false for a query that does not
// parse, and for a target in the absolute form without "//" (URL.Opaque)
// or with user information: such requests bypass the cache.
func (m *Middleware) baseKey(r *http.Request) (key string, ok bool) {
	if m.o.Keys.Func != nil {
		key, ok := m.o.Keys.Func(r)
		if strings.HasPrefix(key, tagKeyPrefix) {
			return "", false // the records of tags (see tagKey) are never a page
		}
		return key, ok
	}
	if key, ok := m.quickKey(r); ok {
		return key, true
	}
	return m.parsedKey(r)
}

// parsedKey is baseKey for any request: it parses the target and
// normalises the query.
func (m *Middleware) parsedKey(r *http.Request) (key string, ok bool) {
	received := r.URL
	if r.RequestURI != "" {
		u, err := url.ParseRequestURI(r.RequestURI)
		if err != nil {
			return "", false
		}
		received = u
	}
	if received.Opaque != "" || received.User != nil {
		// "GET http:x" (no "//": the rest is URL.Opaque) and user
		// information in the target: rare, and nothing a page would be
		// cached for. They bypass rather than be keyed.
		return "", false
	}
	query, ok := m.keyQuery(received.RawQuery)
	if !ok {
		return "", false
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	var b strings.Builder
	b.WriteString("GET ")
	b.WriteString(scheme)
	b.WriteString("://")
	b.WriteString(keyHost(r.Host, scheme))
	b.WriteString(received.EscapedPath())
	if query != "" {
		b.WriteByte('?')
		b.WriteString(query)
	}
	if r.URL.Scheme != "" || r.URL.Host != "" {
		// Absolute-form request targets, and outer middlewares that set
		// the scheme or host from a proxy's headers: the handler sees
		// these, so they are part of the key (as written, never derived
		// from a header here).
		s := strings.ToLower(r.URL.Scheme)
		b.WriteString("\nurl ")
		b.WriteString(s)
		b.WriteString("://")
		b.WriteString(keyHost(r.URL.Host, s))
	}
	if received != r.URL {
		path := r.URL.EscapedPath()
		q, ok := query, true
		if r.URL.RawQuery != received.RawQuery {
			q, ok = m.keyQuery(r.URL.RawQuery)
			if !ok {
				return "", false
			}
		}
		if path != received.EscapedPath() || q != query {
			b.WriteString("\nrewritten ")
			b.WriteString(path)
			if q != "" {
				b.WriteByte('?')
				b.WriteString(q)
			}
		}
	}
	m.writeKeyHeaders(&b, r)
	return b.String(), true
}

// writeKeyHeaders ends a key with the request's keyed header fields.
func (m *Middleware) writeKeyHeaders(b *strings.Builder, r *http.Request) {
	for _, h := range m.keyHeaders {
		b.WriteString("\n")
		b.WriteString(h)
		b.WriteString(": ")
		b.WriteString(headerValue(r.Header, h))
	}
}

// quickKey is baseKey for the common request whose key is its target as
// received, without parsing it: an origin-form target whose path has only
// unreserved characters and slashes and whose query is already in the
// key's form (name=value pairs of unreserved characters, sorted by name,
// every name keyed), which r.URL has not rewritten. It builds the key
// with one allocation; ok is false for every other request, whose key
// parsedKey builds (the same key: a test compares them).
func (m *Middleware) quickKey(r *http.Request) (key string, ok bool) {
	uri := r.RequestURI
	if uri == "" || uri[0] != '/' || r.URL.Scheme != "" || r.URL.Host != "" {
		return "", false
	}
	path, query, _ := strings.Cut(uri, "?")
	for i := 0; i < len(path); i++ {
		if c := path[i]; c != '/' && !unreserved(c) {
			return "", false
		}
	}
	// With RawPath empty, r.URL.EscapedPath() is Path escaped, which is
	// Path itself when it equals path.
	if r.URL.Path != path || r.URL.RawPath != "" || r.URL.RawQuery != query || !m.keyForm(query) {
		return "", false
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	host := keyHost(r.Host, scheme)
	n := len("GET ://") + len(scheme) + len(host) + len(path) + 1 + len(query)
	for _, h := range m.keyHeaders {
		n += len("\n: ") + len(h) + len(headerValue(r.Header, h))
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteString("GET ")
	b.WriteString(scheme)
	b.WriteString("://")
	b.WriteString(host)
	b.WriteString(path)
	if query != "" {
		b.WriteByte('?')
		b.WriteString(query)
	}
	m.writeKeyHeaders(&b, r)
	return b.String(), true
}

// keyForm reports whether the raw query q is what keyQuery makes of it:
// empty, or name=value pairs joined by '&' whose names and values have
// only unreserved characters (which url.QueryEscape leaves as they are),
// names not empty, keyed, and in sorted order (a repeated name's values
// are then adjacent, in their order, as sortedQuery writes them).
func (m *Middleware) keyForm(q string) bool {
	prev := ""
	for len(q) > 0 {
		pair, rest, more := strings.Cut(q, "&")
		if more && rest == "" {
			return false // a trailing '&'
		}
		name, value, ok := strings.Cut(pair, "=")
		if !ok || name == "" || name < prev || !m.keyedParam(name) {
			return false
		}
		for i := 0; i < len(name); i++ {
			if !unreserved(name[i]) {
				return false
			}
		}
		for i := 0; i < len(value); i++ {
			if !unreserved(value[i]) {
				return false
			}
		}
		prev, q = name, rest
	}
	return true
}

// unreserved reports whether c is an unreserved character of RFC 3986
// 2.3, which neither url.PathEscape nor url.QueryEscape escapes.
func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

// keyHost is host lower-cased, without the default port of scheme. It
// is otherwise the host as the handler sees it (r.Host, from which pages
// build their links): the port is cut off as a suffix, never with
// net.SplitHostPort, which also strips square brackets and so gave
// "[example.com]:80" the key of "example.com". It is cut only from a
// plain name: a bracketed host ("[::1]:80", "[example.com]:80") is keyed
// as it is, so "[::1]:80" and "[::1]" are two entries (one render more
// for a host nobody types), and "::1:80" is not "::1".
func keyHost(host, scheme string) string {
	host = strings.ToLower(host)
	var port string
	switch scheme {
	case "http":
		port = ":80"
	case "https":
		port = ":443"
	}
	if h, ok := strings.CutSuffix(host, port); ok && port != "" && !strings.ContainsAny(h, ":[]") {
		host = h
	}
	return host
}

// keyQuery is the keyed part of a raw query, normalised; ok is false if
// it does not parse.
func (m *Middleware) keyQuery(raw string) (string, bool) {
	q, err := url.ParseQuery(raw)
	if err != nil {
		return "", false
	}
	for name := range q {
		if !m.keyedParam(name) {
			delete(q, name)
		}
	}
	return sortedQuery(q), true
}

// keyedParam reports whether the query parameter name is part of the key
// and passed to the handler rendering for the cache.
func (m *Middleware) keyedParam(name string) bool {
	if len(m.o.Keys.Query) > 0 {
		return slices.Contains(m.o.Keys.Query, name)
	}
	return !slices.Contains(m.o.Keys.IgnoreQuery, name)
}

// sortedQuery encodes q sorted by name. The values of a name keep their
// order: ?id=2&id=1 and ?id=1&id=2 may mean different things to the
// application, so they are different keys.
func sortedQuery(q url.Values) string {
	names := make([]string, 0, len(q))
	for n := range q {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		for _, v := range q[n] {
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

// filterQuery returns raw without the parameters that are not keyed,
// leaving the others as sent and in their order. A parameter whose name
// does not unescape is dropped (baseKey bypasses such queries anyway).
func (m *Middleware) filterQuery(raw string) string {
	var b strings.Builder
	for part := range strings.SplitSeq(raw, "&") {
		if part == "" {
			continue
		}
		name, _, _ := strings.Cut(part, "=")
		name, err := url.QueryUnescape(name)
		if err != nil || !m.keyedParam(name) {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('&')
		}
		b.WriteString(part)
	}
	return b.String()
}

// prepareRender makes rr, a clone of a request about to be rendered for
// the cache, carry only what the key accounts for, since the response is
// stored for every request with this key. It is the one place that
// decides what the handler sees when it renders for the cache:
//
//   - query parameters left out of the key (IgnoreQuery, or not in
//     Keys.Query) are removed from rr.URL.RawQuery and rr.RequestURI, and
//     rr.Form is reset so that it is parsed again without them;
//   - the body is no part of the key, so the handler gets none: rr.Body
//     is http.NoBody, rr.ContentLength 0, the headers of bodyHeaders
//     (Content-Type, Content-Length, ...) are removed, and rr.Form,
//     rr.PostForm and rr.MultipartForm are reset, so that r.FormValue
//     parses the (keyed) query only. A GET or HEAD that says it has a
//     body bypasses the cache (see bypass); this covers the rest, such as
//     a request served in-process with a Body but no length, or a form
//     an outer middleware parsed already;
//   - the URL-rewriting headers of unkeyedHeaders are removed unless
//     Keys.Headers names them;
//   - conditional and range headers (perClientHeaders) are removed: the
//     handler's 304 or 412 answers one client's condition and cannot be
//     stored, so every waiter would render; the middleware answers
//     If-None-Match and If-Modified-Since from the stored response.
//
// Header names are matched in any letter case, for headers an outer
// middleware set in the map directly.
func (m *Middleware) prepareRender(rr *http.Request) {
	if len(m.o.Keys.IgnoreQuery) > 0 || len(m.o.Keys.Query) > 0 {
		rr.URL.RawQuery = m.filterQuery(rr.URL.RawQuery)
		rr.URL.ForceQuery = false
		if path, q, found := strings.Cut(rr.RequestURI, "?"); found {
			if q = m.filterQuery(q); q != "" {
				path += "?" + q
			}
			rr.RequestURI = path
		}
	}
	rr.Body, rr.GetBody, rr.ContentLength, rr.TransferEncoding, rr.Trailer = http.NoBody, nil, 0, nil, nil
	rr.Form, rr.PostForm, rr.MultipartForm = nil, nil, nil
	for name := range rr.Header {
		canon := http.CanonicalHeaderKey(name)
		if slices.Contains(perClientHeaders(), canon) || slices.Contains(bodyHeaders(), canon) ||
			slices.Contains(unkeyedHeaders(), canon) && !containsFold(m.keyHeaders, canon) {
			delete(rr.Header, name)
		}
	}
}

// headerValue is a request header's values as one comparable string, for
// keys and for matching a request to a stored variant. It trims only what
// HTTP treats as whitespace around a value (spaces and tabs): other bytes
// are part of the value the handler sees, so they must be part of the
// key. It must not modify h (Values returns h's own slice).
//
// It keeps the field's lines apart. "User-Agent: A" and "User-Agent: B"
// on two lines are not the one line "A, B": r.Header.Get gives the
// handler A, so the render for the two lines must never answer a client
// that sent "A, B" (one split at a comma would poison that variant).
// Bypassing such requests instead would take a check in every path that
// builds a key (hit, render, revalidation, range), where one missed is
// the poisoning again; keys of their own cost one render per distinct
// set of lines, which distinct values cost already. So one line is its
// trimmed value as it is (no allocation); several lines, or one with a
// control character (only a request made in-process can have one, and
// "\n" would be read as another line of the key), are written as a
// space and each line quoted (strconv.Quote): ` "A" "B"`. The leading
// space tells the two forms apart, since a trimmed value never starts
// with one. No lines and one empty line are both "", as Header.Get sees
// them.
func headerValue(h http.Header, name string) string {
	vs := h.Values(name)
	switch len(vs) {
	case 0:
		return ""
	case 1:
		if v := strings.Trim(vs[0], " \t"); !hasControl(v) {
			return v // a part of h's string: no allocation
		}
	}
	var b strings.Builder
	for _, v := range vs {
		b.WriteByte(' ')
		b.WriteString(strconv.Quote(strings.Trim(v, " \t")))
	}
	return b.String()
}

// hasControl reports whether s has an ASCII control character.
func hasControl(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c == 0x7f {
			return true
		}
	}
	return false
}

// unkeyedHeaders lists request headers that frameworks and proxies use to
// rewrite URLs, hosts, schemes and methods. A response shaped by one of
// them must not be stored for requests without it, so they are removed
// from the request the handler sees when rendering for the cache, unless
// Options.Keys.Headers puts them in the key.
func unkeyedHeaders() []string {
	return []string{
		"Forwarded", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Forwarded-Scheme", "X-Forwarded-Port",
		"X-Forwarded-Prefix", "X-Forwarded-Server", "X-Host", "X-Original-Host", "X-Original-Url", "X-Rewrite-Url",
		"X-Http-Method-Override", "X-Http-Method", "X-Method-Override",
		"X-Forwarded-Uri", "X-Original-Uri", "X-Envoy-Original-Path", "X-Forwarded-Ssl", "Front-End-Https", "X-Url-Scheme",
	}
}

// perClientHeaders lists the request headers that make a response answer
// one client's conditions or ranges; they never reach a render for the
// cache (see prepareRender). Range requests bypass the cache, so Range
// and If-Range are listed only for completeness.
func perClientHeaders() []string {
	return []string{"If-Match", "If-None-Match", "If-Modified-Since", "If-Unmodified-Since", "If-Range", "Range"}
}

// bodyHeaders lists the request headers that describe a body; the
// handler rendering for the cache gets no body, so none of them either.
func bodyHeaders() []string {
	return []string{"Content-Type", "Content-Length", "Content-Encoding", "Transfer-Encoding", "Trailer"}
}
