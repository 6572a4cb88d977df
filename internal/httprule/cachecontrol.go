package httprule

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// cacheControl is a parsed Cache-Control header (RFC 9111 section 5.2).
// Unknown directives are ignored; a malformed delta-seconds counts as
// absent, except that it makes the header "broken", which shared caches
// must treat conservatively.
type cacheControl struct {
	noStore, noCache, private, public, mustRevalidate, proxyRevalidate bool
	mustUnderstand, onlyIfCached                                       bool
	maxAge, sMaxAge, staleWhileRevalidate, staleIfError                time.Duration
	hasMaxAge, hasSMaxAge                                              bool
	broken                                                             bool
	targeted                                                           bool // from a targeted field (RFC 9213): Expires and Pragma do not count
}

// storeForbidden reports whether the no-store directive keeps a response
// with this status out: it does, unless must-understand accompanies it
// and the status is one this cache knows (RFC 9111 5.2.2.3: such a cache
// SHOULD ignore no-store; the pair means "store only if you understand
// the status").
func (cc cacheControl) storeForbidden(status int) bool {
	return cc.noStore && !(cc.mustUnderstand && http.StatusText(status) != "")
}

// flag sets the directive name (lowercase) if it is one without a value
// that this cache knows, and reports whether it was.
func (cc *cacheControl) flag(name string) bool {
	switch name {
	case "no-store":
		cc.noStore = true
	case "no-cache":
		cc.noCache = true
	case "private":
		cc.private = true
	case "public":
		cc.public = true
	case "must-understand":
		cc.mustUnderstand = true
	case "must-revalidate":
		cc.mustRevalidate = true
	case "proxy-revalidate":
		cc.proxyRevalidate = true
	case "only-if-cached":
		cc.onlyIfCached = true
	default:
		return false
	}
	return true
}

// parseCacheControl parses every Cache-Control field value of a message.
// It never panics on any input.
func parseCacheControl(values []string) cacheControl {
	var cc cacheControl
	for _, v := range values {
		for _, part := range splitDirectives(v) {
			name, arg, hasArg := strings.Cut(part, "=")
			name = strings.ToLower(strings.TrimSpace(name))
			arg = strings.Trim(strings.TrimSpace(arg), `"`)
			secs := func() (time.Duration, bool) {
				if !hasArg {
					cc.broken = true
					return 0, false
				}
				n, err := strconv.ParseInt(arg, 10, 64)
				if err != nil || n < 0 {
					cc.broken = true
					return 0, false
				}
				// RFC 9111 1.2.2: values beyond 2^31 count as 2^31 seconds.
				return time.Duration(min(n, 1<<31)) * time.Second, true
			}
			if cc.flag(name) {
				continue // no-cache or private with a field list still count whole
			}
			switch name {
			case "max-age":
				if d, ok := secs(); ok && !cc.hasMaxAge {
					cc.maxAge, cc.hasMaxAge = d, true
				}
			case "s-maxage":
				if d, ok := secs(); ok && !cc.hasSMaxAge {
					cc.sMaxAge, cc.hasSMaxAge = d, true
				}
			case "stale-while-revalidate":
				if d, ok := secs(); ok {
					cc.staleWhileRevalidate = d
				}
			case "stale-if-error":
				if d, ok := secs(); ok {
					cc.staleIfError = d
				}
			}
		}
	}
	return cc
}

// parseSurrogateControl parses the Surrogate-Control fields of a response
// (W3C Edge Architecture: max-age and no-store for surrogates) as
// Cache-Control directives. Directives targeted at a device
// ("max-age=60;cdn") are skipped: this cache has no device name.
func parseSurrogateControl(values []string) cacheControl {
	var untargeted []string
	for _, v := range values {
		for _, part := range splitDirectives(v) {
			if !strings.Contains(part, ";") {
				untargeted = append(untargeted, part)
			}
		}
	}
	return parseCacheControl([]string{strings.Join(untargeted, ", ")})
}

// splitDirectives splits a field value at commas outside quoted strings.
func splitDirectives(v string) []string {
	var out []string
	inQuote, start := false, 0
	for i := 0; i < len(v); i++ {
		switch v[i] {
		case '"':
			inQuote = !inQuote
		case '\\':
			if inQuote {
				i++
			}
		case ',':
			if !inQuote {
				out = append(out, v[start:i])
				start = i + 1
			}
		}
	}
	out = append(out, v[start:])
	for i := range out {
		out[i] = strings.TrimSpace(out[i])
	}
	return out
}

// Asks is what a request's Cache-Control and Pragma ask of a cache, read
// from every line of both.
type Asks struct {
	// NoCache: no-cache in Cache-Control or Pragma (RFC 9111 5.2.1.4,
	// 5.4): its client asks for a response validated with the origin.
	NoCache bool
	// OnlyIfCached: only-if-cached in Cache-Control (RFC 9111 5.2.1.7):
	// it wants a stored response or none.
	OnlyIfCached bool
}

// RequestAsks reads what a request with header h asks of a cache, parsing
// its Cache-Control once.
func RequestAsks(h http.Header) Asks {
	cc := parseCacheControl(h["Cache-Control"])
	return Asks{NoCache: cc.noCache || pragmaNoCache(h["Pragma"]), OnlyIfCached: cc.onlyIfCached}
}

// pragmaNoCache reports whether Pragma fields hold the no-cache directive
// (RFC 9111 5.4).
func pragmaNoCache(values []string) bool {
	for _, v := range values {
		for _, part := range splitDirectives(v) {
			if strings.EqualFold(part, "no-cache") {
				return true
			}
		}
	}
	return false
}
