package middleware

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hotkv/stampede/internal/failpoint"
)

// This file holds purging by URL (PurgeURL) and the PURGE method
// (Options.Purge).

// methodPurge is the method of a purge request, as Varnish, Squid, nginx
// and Fastly take it.
const methodPurge = "PURGE"

// PurgeURL removes the stored page of a GET of rawURL (absolute: "https://
// example.com/items?id=1"), every Vary variant of it included, in every
// process, near caches included: from its return on, no request is
// answered with it, and a render that was running meanwhile is not
// stored. The key is the one a request for rawURL received with the
// header h (nil for none) would have: h matters only for the names in
// Keys.Headers, whose pages for other values of them stay (tag them, see
// Options.Tags, to purge them all). The query is normalised as for a
// request's key (IgnoreQuery and Query apply), so the order of its
// parameters does not matter.
//
// Both schemes are purged, whichever rawURL has: behind a load balancer
// or proxy that ends TLS, a page of an https URL is received, and stored,
// as http (the request has no TLS), and the other way round behind one
// that speaks TLS to this server. Under the other scheme the Host with
// and without the default port of rawURL's are purged too (for
// "https://example.com/a": "example.com" and "example.com:443" as http),
// since a client may send either. A page purged that was not stale costs
// one render, no more.
func (m *Middleware) PurgeURL(ctx context.Context, rawURL string, h http.Header) error {
	keys, err := m.urlKeys(ctx, "PurgeURL", rawURL, h)
	if err != nil {
		return err
	}
	failpoint.Inject(ctx, failpoint.MiddlewarePurge)
	if err := m.deleteAll(ctx, keys); err != nil {
		return fmt.Errorf("middleware: purge %q: %w", rawURL, err)
	}
	return nil
}

// urlKeys returns the base keys of a GET of rawURL received with the
// header h, under both schemes (see purgeKeys), for op (PurgeURL or
// SoftPurgeURL), or an error naming op and what is wrong with rawURL.
func (m *Middleware) urlKeys(ctx context.Context, op, rawURL string, h http.Header) ([]string, error) {
	u, err := url.Parse(rawURL)
	switch {
	case err != nil:
		return nil, invalid("%s: %v", op, err)
	case u.Scheme != "http" && u.Scheme != "https", u.Host == "", u.Opaque != "", u.User != nil:
		return nil, invalid("%s: %q is not an absolute http or https URL without user information", op, rawURL)
	}
	// The keys of a GET of rawURL as received on its own origin, over
	// https and over http (see purgeKeys).
	if u.Path == "" {
		u.Path, u.RawPath = "/", "" // "http://host" is "http://host/" (RFC 9110 4.2.3)
	}
	get := (&http.Request{Method: http.MethodGet, Header: h, Host: u.Host,
		URL: &url.URL{Path: u.Path, RawPath: u.RawPath, RawQuery: u.RawQuery}}).WithContext(ctx)
	get.RequestURI = get.URL.RequestURI()
	if get.Header == nil {
		get.Header = http.Header{}
	}
	if u.Scheme == "https" {
		get.TLS = &tls.ConnectionState{}
	}
	keys, ok := m.purgeKeys(get)
	if !ok {
		return nil, invalid("%s: %q has no key (a query that does not parse, or Keys.Func refused it)", op, rawURL)
	}
	return keys, nil
}

// purgeKeys returns the base keys of get, a GET, under both schemes: as
// received with TLS and without, since behind a balancer or proxy that
// ends TLS a page of an https URL arrives, and is stored, as http (r.TLS
// is nil), and the other way round behind one that speaks TLS to the
// origin. Under the scheme that is not get's the default port matters
// (keyHost drops only the scheme's own), so it also purges the Host a
// client of get's origin may send with the default port written or not:
// for https://example.com/, the http keys of "example.com" and
// "example.com:443". A key too many costs a render; a key too few leaves
// the page. ok is false if get has no key.
func (m *Middleware) purgeKeys(get *http.Request) (keys []string, ok bool) {
	port := ":80"
	if get.TLS != nil {
		port = ":443"
	}
	hosts := []string{get.Host}
	switch {
	case get.Host == "":
	case !hasPort(get.Host):
		hosts = append(hosts, get.Host+port)
	case strings.HasSuffix(get.Host, port):
		hosts = append(hosts, strings.TrimSuffix(get.Host, port))
	}
	for _, secure := range [...]bool{get.TLS != nil, get.TLS == nil} {
		for _, host := range hosts {
			lr := get.WithContext(get.Context())
			lr.Host, lr.TLS = host, nil
			if secure {
				lr.TLS = &tls.ConnectionState{}
			}
			key, ok := m.baseKey(lr)
			if !ok {
				return nil, false
			}
			if !slices.Contains(keys, key) {
				keys = append(keys, key)
			}
		}
	}
	return keys, true
}

// hasPort reports whether host (a Host field) ends in a port.
func hasPort(host string) bool {
	if i := strings.LastIndexByte(host, ']'); i >= 0 {
		host = host[i+1:] // a bracketed IPv6 literal
	}
	return strings.Contains(host, ":")
}

// deleteAll deletes each of keys: entries, or the markers of responses
// with Vary (see generationBase), concurrently (one round trip, not one
// per key, as invalidate does). It tries them all and returns what
// failed.
func (m *Middleware) deleteAll(ctx context.Context, keys []string) error {
	errs := make([]error, len(keys))
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Go(func() { errs[i] = m.c.Delete(ctx, k) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// servePurge answers r, a PURGE request (see PurgePolicy).
func (m *Middleware) servePurge(w http.ResponseWriter, r *http.Request) outcome {
	if !m.o.Purge.Authorize(r) {
		m.purgeAnswer(w, http.StatusForbidden, "purge-forbidden", "purge not allowed\n")
		return outcome{kind: EventBypass, reason: "a PURGE that Purge.Authorize refused"}
	}
	ctx := context.WithoutCancel(r.Context()) // a client that goes must not leave it half done
	soft, why := softPurgeAsked(r.Header)
	if why != "" {
		m.purgeAnswer(w, http.StatusBadRequest, "purge-invalid", why+"\n")
		return outcome{kind: EventBypass, reason: "a PURGE with invalid " + why}
	}
	detail := "purged"
	if soft {
		detail = "soft-purged"
	}
	tags, why := parseTags(r.Header, m.tagHeaders)
	if why == "" && len(tags) == 0 && m.listsTagField(r.Header) {
		why = "no tags listed" // never the URL instead: a purge of tags that went wrong
	}
	if why != "" {
		m.purgeAnswer(w, http.StatusBadRequest, "purge-invalid", why+"\n")
		return outcome{kind: EventBypass, reason: "a PURGE with invalid " + why}
	}
	if len(tags) > 0 {
		purge := m.PurgeTag
		if soft {
			purge = m.SoftPurgeTag
		}
		if err := purge(ctx, tags...); err != nil {
			m.purgeAnswer(w, http.StatusServiceUnavailable, "purge-failed", "purge failed\n")
			return outcome{kind: EventBypass, reason: "a PURGE of tags", err: err}
		}
		m.purgeAnswer(w, http.StatusOK, detail+"-tags", fmt.Sprintf("%s %d tags\n", strings.ReplaceAll(detail, "-", " "), len(tags)))
		return outcome{kind: EventBypass, reason: "a PURGE of tags"}
	}
	get := r.WithContext(ctx)
	get.Method = http.MethodGet
	keys, ok := m.purgeKeys(get)
	if !ok {
		m.purgeAnswer(w, http.StatusBadRequest, "purge-invalid", "no key for the URL\n")
		return outcome{kind: EventBypass, reason: "a PURGE of a URL without a key"}
	}
	failpoint.Inject(ctx, failpoint.MiddlewarePurge)
	purge := m.deleteAll
	if soft {
		purge = m.softAll
	}
	if err := purge(ctx, keys); err != nil {
		m.purgeAnswer(w, http.StatusServiceUnavailable, "purge-failed", "purge failed\n")
		return outcome{kind: EventBypass, reason: "a PURGE of a URL", err: err}
	}
	m.purgeAnswer(w, http.StatusOK, detail+"-url", strings.ReplaceAll(detail, "-", " ")+"\n")
	return outcome{kind: EventBypass, reason: "a PURGE of a URL"}
}

// purgeAnswer answers a PURGE with code and the plain text text. The
// answer is the middleware's own, not a response it cached or forwarded:
// it carries no Cache-Status (RFC 9211 2), and says what happened in the
// status header: "PURGE; detail=" and detail (see PurgePolicy).
func (m *Middleware) purgeAnswer(w http.ResponseWriter, code int, detail, text string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(text)))
	h.Set("Cache-Control", "no-store")
	h.Del("Cache-Status")
	if m.statusHeader != "-" {
		h[m.statusHeader] = []string{"PURGE; detail=" + detail}
	}
	w.WriteHeader(code)
	_, _ = w.Write([]byte(text))
}

// listsTagField reports whether h, a PURGE's header, has one of the tag
// fields (Options.Tags.Headers), even an empty one.
func (m *Middleware) listsTagField(h http.Header) bool {
	for _, n := range m.tagHeaders {
		if _, ok := h[n]; ok {
			return true
		}
	}
	return false
}

// PurgeHandler returns a handler that answers PURGE requests as the
// middleware does with Options.Purge (the same Authorize, purges and
// answers), for a router that routes before the middleware runs. chi runs
// the middlewares of a group (r.Group, r.Route, r.With) only for the
// routes it finds, so a PURGE of a page served in a group is answered 405
// by chi unless a route takes it:
//
//	r.Group(func(r chi.Router) {
//		r.Use(m.Handler)
//		r.Get("/items/{id}", item)
//	})
//	r.Method("PURGE", "/*", m.PurgeHandler())
//
// (m.Handler in the root router's r.Use, before any route, sees every
// request and needs no such route.) It answers other methods 405 Method
// Not Allowed with "Allow: PURGE". Without Options.Purge it answers every
// PURGE 501 Not Implemented (detail=purge-disabled) and purges nothing:
// there is no Authorize to ask, and the answer says that purging is not
// set up, which a 403 would hide as a wrong secret. Its answers are
// observed as the middleware's are (Options.Observer, Logger).
func (m *Middleware) PurgeHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !m.observing() {
			m.purgeRoute(w, r)
			return
		}
		start := time.Now()
		route := m.route(r)
		sw := &statusWriter{ResponseWriter: w}
		o := m.purgeRoute(sw, r)
		o.status = sw.sent(o.kind)
		m.observe(r.Context(), r.Method, route, time.Since(start), o)
	})
}

// purgeRoute answers r for PurgeHandler.
func (m *Middleware) purgeRoute(w http.ResponseWriter, r *http.Request) outcome {
	switch {
	case r.Method != methodPurge:
		h := w.Header()
		h.Set("Allow", methodPurge)
		h.Set("Content-Type", "text/plain; charset=utf-8")
		h.Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusMethodNotAllowed)
		_, _ = w.Write([]byte("method not allowed\n"))
		return outcome{kind: EventBypass, reason: "a method other than PURGE on PurgeHandler"}
	case m.o.Purge == nil:
		m.purgeAnswer(w, http.StatusNotImplemented, "purge-disabled", "purge not enabled\n")
		return outcome{kind: EventBypass, reason: "a PURGE without Options.Purge"}
	}
	return m.servePurge(w, r)
}
