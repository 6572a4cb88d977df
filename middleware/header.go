package middleware

import (
	"net/http"
	"sort"
	"strings"
)

// present reports whether h has a non-empty line of the field name, in
// canonical form (as r.Cookie and Header.Get look it up), on any of its
// lines. It allocates nothing: the hit path asks for a few every request.
func present(h http.Header, name string) bool {
	for _, v := range h[name] {
		if v != "" {
			return true
		}
	}
	return false
}

// first is h.Get(name) for a name in canonical form, without
// canonicalising it again. It is for response fields and for request
// fields where the first line alone decides nothing a client could turn
// against others; a check that a field is absent uses present.
func first(h http.Header, name string) string {
	if vs := h[name]; len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// containsASCIIFold reports whether s contains sub, an ASCII lower-case
// string, in any letter case of ASCII letters. (No other character
// lower-cases to one of the letters of "no-store", which is what it is
// for.)
func containsASCIIFold(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if strings.EqualFold(s[i:i+len(sub)], sub) {
			return true
		}
	}
	return false
}

// containsFold reports whether list holds s, in any letter case.
func containsFold(list []string, s string) bool {
	for _, v := range list {
		if strings.EqualFold(v, s) {
			return true
		}
	}
	return false
}

// canonicalHeader merges the fields of h whose names are not in canonical
// form (set in the map directly: w.Header()["set-cookie"]) into the
// canonical name's values, after those already there, so that
// h.Values, h.Get and the storage rules see them. net/http sends such
// names as written and clients accept them, so they count. Names that
// differ only in case are merged in sorted order, for a result that does
// not depend on map order. Names CanonicalHeaderKey leaves alone (invalid
// ones, which net/http does not send) stay as they are.
func canonicalHeader(h http.Header) {
	var odd []string
	for k := range h {
		if http.CanonicalHeaderKey(k) != k {
			odd = append(odd, k)
		}
	}
	sort.Strings(odd)
	for _, k := range odd {
		ck := http.CanonicalHeaderKey(k)
		h[ck] = append(h[ck], h[k]...)
		delete(h, k)
	}
}
