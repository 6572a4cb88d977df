package middleware

import (
	"hash/maphash"
	"net/http"
	"sort"
	"strings"
	"sync"
)

// varyIndex remembers, per base key, the header names responses vary on,
// so requests go straight to their variant's key. It is bounded: when
// full it forgets everything, which costs one extra lookup per resource.
// Entries are keyed by a 64-bit hash of the base key (hash/maphash, with a
// seed of the index's own), so the index holds at most varyIndexMax times
// 8 bytes of keys however long the base keys (up to a whole request
// target and header values) are. Two base keys with one hash share an
// entry: that costs lookups, never a wrong answer, since a stored
// response is served only to a request it matches (response.matches).
//
// Lookups take no lock (every hit makes one); puts, which come with
// renders, take mu. The names stored are read-only: they are a stored
// response's Vary, which near-cache hits share (see response).
type varyIndex struct {
	once  sync.Once
	seed  maphash.Seed
	names sync.Map // uint64 → []string
	mu    sync.Mutex
	n     int // entries in names; guarded by mu
}

const varyIndexMax = 10000

func (v *varyIndex) key(base string) uint64 {
	v.once.Do(func() { v.seed = maphash.MakeSeed() })
	return maphash.String(v.seed, base)
}

func (v *varyIndex) get(base string) []string {
	names, _ := v.names.Load(v.key(base))
	s, _ := names.([]string)
	return s
}

func (v *varyIndex) put(base string, names []string) {
	k := v.key(base)
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(names) == 0 {
		if _, had := v.names.LoadAndDelete(k); had {
			v.n--
		}
		return
	}
	if _, had := v.names.Swap(k, names); had {
		return
	}
	if v.n++; v.n > varyIndexMax {
		v.names.Clear()
		v.names.Store(k, names)
		v.n = 1
	}
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
