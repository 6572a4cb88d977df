package middleware

import (
	"bufio"
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
)

// This file holds invalidation (RFC 9111 4.4): a request with a method
// not known to be safe whose response is a success (2xx) or a redirect
// (3xx) deletes the stored responses of its target URL and of the
// Location and Content-Location URLs of its response on the same origin
// (scheme, host and port), in every process (cache.Delete), with every
// Vary variant: deleting the base's marker puts all of them out of reach
// (see generationBase).

// safeMethod reports whether RFC 9110 9.2.1 defines method as safe; every
// other method, including unknown ones, invalidates.
func safeMethod(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

// invalidator watches the response to an unsafe request and, as soon as
// its status is known to be a success or a redirect (WriteHeader, or the
// first Write or Flush, or the handler's return without either),
// invalidates before anything reaches the client: a client that writes
// and then reads never gets the page from before its write.
type invalidator struct {
	http.ResponseWriter
	m    *Middleware
	r    *http.Request
	once sync.Once
}

func (iv *invalidator) WriteHeader(code int) {
	if code >= 200 {
		iv.decide(code)
	}
	iv.ResponseWriter.WriteHeader(code)
}

func (iv *invalidator) Write(p []byte) (int, error) {
	iv.decide(http.StatusOK) // a no-op if WriteHeader came first
	return iv.ResponseWriter.Write(p)
}

// Flush sends the header (200 if none was written) and flushes.
func (iv *invalidator) Flush() {
	iv.decide(http.StatusOK)
	_ = http.NewResponseController(iv.ResponseWriter).Flush()
}

// Hijack hands the connection to the handler; nothing is invalidated:
// whatever it writes is no HTTP response the cache can judge.
func (iv *invalidator) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	iv.once.Do(func() {})
	return http.NewResponseController(iv.ResponseWriter).Hijack()
}

// Unwrap lets http.ResponseController reach the real writer.
func (iv *invalidator) Unwrap() http.ResponseWriter { return iv.ResponseWriter }

// decide invalidates once, for a response with status code.
func (iv *invalidator) decide(code int) {
	iv.once.Do(func() {
		if code >= 200 && code < 400 {
			iv.m.invalidate(iv.r, iv.ResponseWriter.Header())
		}
	})
}

// invalidate deletes the stored responses for r's target URL and for the
// Location and Content-Location URLs in h that are on r's origin (RFC
// 9111 4.4: never another origin's, so that one origin cannot evict
// another's pages), relative ones resolved against r's target. Keys are
// those a GET of each URL would have, with r's own header values where
// the key has any (Keys.Headers); every Vary variant goes too. Failures
// are logged: the entries then expire as they would have.
func (m *Middleware) invalidate(r *http.Request, h http.Header) {
	ctx := context.WithoutCancel(r.Context()) // the client going must not leave it half done
	get := r.WithContext(ctx)
	get.Method = http.MethodGet
	bases := make([]string, 0, 3)
	if base, ok := m.baseKey(get); ok {
		bases = append(bases, base)
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	// Relative references resolve against the URL the client asked for
	// (RFC 9110 10.2.2, 8.7), as the client resolves them.
	target := &url.URL{Scheme: scheme, Host: r.Host, Path: "/"}
	if u := requestedURL(r); u != nil {
		target.Path, target.RawPath, target.RawQuery = u.Path, u.RawPath, u.RawQuery
	}
	for _, name := range []string{"Location", "Content-Location"} {
		v := first(h, name)
		if v == "" {
			vs := h.Values(name) // set in another letter case than the canonical
			if len(vs) == 0 {
				continue
			}
			v = vs[0]
		}
		if base, ok := m.keyFor(get, target, v); ok && !slices.Contains(bases, base) {
			bases = append(bases, base)
		}
	}
	var wg sync.WaitGroup
	for _, base := range bases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.invalidateBase(ctx, base)
		}()
	}
	wg.Wait()
}

// requestedURL is r's target as the client sent it (r.RequestURI; r.URL
// for a request without one, or whose target does not parse), before
// any rewrite such as http.StripPrefix, as the key has it.
func requestedURL(r *http.Request) *url.URL {
	if r.RequestURI != "" {
		if u, err := url.ParseRequestURI(r.RequestURI); err == nil {
			return u
		}
	}
	return r.URL
}

// keyFor is the base key of a GET of ref (a Location or Content-Location
// value, resolved against target, which has r's scheme, host and
// target), or ok false if ref does not parse, is not http or https, or
// is not on r's origin: another scheme, host or port (RFC 9111 4.4).
func (m *Middleware) keyFor(get *http.Request, target *url.URL, ref string) (string, bool) {
	u, err := target.Parse(strings.TrimSpace(ref))
	if err != nil || u.Opaque != "" || u.User != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return "", false
	}
	if u.Scheme != target.Scheme || keyHost(u.Host, u.Scheme) != keyHost(target.Host, target.Scheme) {
		return "", false
	}
	if u.Path == "" {
		u.Path, u.RawPath = "/", "" // "http://host" is "http://host/" (RFC 9110 4.2.3)
	}
	lr := get.WithContext(get.Context())
	lr.URL = &url.URL{Path: u.Path, RawPath: u.RawPath, RawQuery: u.RawQuery}
	lr.RequestURI = lr.URL.RequestURI()
	lr.Host = get.Host
	lr.TLS = nil
	if u.Scheme == "https" {
		lr.TLS = &tls.ConnectionState{}
	}
	return m.baseKey(lr)
}

// invalidateBase deletes base's entry: a response, or the marker of a
// response with Vary, whose variants, however many, are then out of
// reach (see generationBase) and expire unread. A Delete that fails is
// sent once more (a failure is a fact about that moment, a dropped
// connection most often); a second failure is logged, and the entries
// then expire as they would have.
func (m *Middleware) invalidateBase(ctx context.Context, base string) {
	err := m.c.Delete(ctx, base)
	if err != nil && ctx.Err() == nil {
		err = m.c.Delete(ctx, base)
	}
	if err != nil && m.o.Logger != nil {
		m.o.Logger.Warn("middleware: invalidation failed", "err", err)
	}
}
