package httprule

import (
	"net/http"
	"strings"
	"time"
)

// Targeted cache control (RFC 9213): a response field such as
// CDN-Cache-Control carries Cache-Control directives for one class of
// caches. A cache of that class that finds one of its targeted fields
// valid obeys the first (in Policy.Targeted order) and ignores
// Cache-Control, Expires and Surrogate-Control for that response; an
// invalid one is as if absent. The fields are Structured Fields
// Dictionaries (RFC 8941 3.2): a value that is not one, or a directive
// whose value has the wrong type, makes the field invalid.

// control returns the directives that govern storing a response with
// header h (canonical): those of the first valid field of p.Targeted,
// else its Cache-Control.
func control(h http.Header, p *Policy) cacheControl {
	if len(p.Targeted) > 0 {
		if cc, _, ok := targetedControl(h, p.Targeted); ok {
			return cc
		}
	}
	return parseCacheControl(h.Values("Cache-Control"))
}

// targetedControl returns the directives of the first of the fields
// names in h that holds a valid, non-empty Dictionary; ok is false if
// none does. h must be canonical.
func targetedControl(h http.Header, names []string) (cc cacheControl, name string, ok bool) {
	for _, n := range names {
		lines := h[http.CanonicalHeaderKey(n)]
		if len(lines) == 0 {
			continue
		}
		if cc, ok := parseTargeted(lines); ok {
			return cc, n, true
		}
	}
	return cacheControl{}, "", false
}

// parseTargeted parses the lines of a targeted field as one Dictionary
// (lines are joined with commas, RFC 8941 4.2) into directives: booleans
// (no-store, private, ...) must be true without a value, the
// delta-seconds (max-age, s-maxage, stale-while-revalidate,
// stale-if-error) non-negative Integers; parameters are ignored, and so
// are directives this cache does not know, whatever their value. ok is
// false for an empty or invalid field.
func parseTargeted(lines []string) (cc cacheControl, ok bool) {
	d, ok := parseDictionary(strings.Join(lines, ","))
	if !ok || len(d) == 0 {
		return cacheControl{}, false
	}
	cc.targeted = true
	for _, m := range d {
		switch m.key {
		case "no-store", "no-cache", "private", "public", "must-revalidate", "proxy-revalidate", "must-understand":
			// RFC 9213 2.2: no-cache and private may carry a String (a
			// field list), which counts as the directive without one,
			// as in Cache-Control.
			if m.kind != sfBoolean && !(m.kind == sfString && (m.key == "no-cache" || m.key == "private")) || m.kind == sfBoolean && !m.boolean {
				return cacheControl{}, false
			}
			cc.flag(m.key)
		case "max-age", "s-maxage", "stale-while-revalidate", "stale-if-error":
			if m.kind != sfInteger || m.integer < 0 {
				return cacheControl{}, false
			}
			// RFC 9111 1.2.2: values beyond 2^31 count as 2^31 seconds.
			secs := time.Duration(min(m.integer, 1<<31)) * time.Second
			switch m.key {
			case "max-age":
				cc.maxAge, cc.hasMaxAge = secs, true
			case "s-maxage":
				cc.sMaxAge, cc.hasSMaxAge = secs, true
			case "stale-while-revalidate":
				cc.staleWhileRevalidate = secs
			case "stale-if-error":
				cc.staleIfError = secs
			}
		}
	}
	return cc, true
}
