package httprule

import (
	"net/http"
	"sort"
	"strings"
)

// ParseVary returns the canonical header names of a response's Vary
// fields (h canonical), sorted and without duplicates; star reports
// "Vary: *", with which a response varies on everything and is never
// shared.
func ParseVary(h http.Header) (names []string, star bool) {
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
