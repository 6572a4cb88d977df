package middleware

import (
	"crypto/sha256"
	"net/http"
	"sort"
	"strings"
	"sync"
)

// varyIndex remembers, per base key, the header names responses vary on,
// so requests go straight to their variant's key. It is bounded: when
// full it forgets everything, which costs one extra lookup per resource.
// Entries are keyed by the SHA-256 of the base key, so the index holds
// at most varyIndexMax times 32 bytes of keys however long the base keys
// (up to a whole request target and header values) are.
type varyIndex struct {
	mu    sync.Mutex
	names map[[sha256.Size]byte][]string
}

const varyIndexMax = 10000

func (v *varyIndex) get(base string) []string {
	k := sha256.Sum256([]byte(base))
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.names[k]
}

func (v *varyIndex) put(base string, names []string) {
	k := sha256.Sum256([]byte(base))
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(names) == 0 {
		delete(v.names, k)
		return
	}
	if v.names == nil || len(v.names) >= varyIndexMax {
		v.names = make(map[[sha256.Size]byte][]string)
	}
	v.names[k] = names
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
