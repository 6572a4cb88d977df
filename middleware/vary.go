package middleware

import (
	"hash/maphash"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/hotkv/stampede/internal/httprule"
)

// varyIndex remembers, per base key, the header names responses vary on
// and the generation of the base's variants (see generationBase), so
// requests go straight to their variant's key. It is bounded: when full
// it forgets everything, which costs one extra lookup per resource.
// Entries are keyed by a 64-bit hash of the base key (hash/maphash, with a
// seed of the index's own), so the index holds at most varyIndexMax times
// 8 bytes of keys however long the base keys (up to a whole request
// target and header values) are. Two base keys with one hash share an
// entry: that costs lookups, never a wrong answer, since a stored
// response is served only to a request it matches (response.matches) and
// a variant only in the generation the base's marker names.
//
// Lookups take no lock (every hit makes one); puts, which come with
// markers read, take mu. The names stored are read-only: they are a
// stored marker's Vary, which near-cache hits share (see response).
type varyIndex struct {
	once  sync.Once
	seed  maphash.Seed
	names sync.Map // uint64 → variants
	mu    sync.Mutex
	n     int // entries in names; guarded by mu
}

// variants is what a base's marker says of its variants: the names they
// vary on and their generation.
type variants struct {
	names []string
	gen   uint64
}

const varyIndexMax = 10000

func (v *varyIndex) key(base string) uint64 {
	v.once.Do(func() { v.seed = maphash.MakeSeed() })
	return maphash.String(v.seed, base)
}

func (v *varyIndex) get(base string) (names []string, gen uint64) {
	e, _ := v.names.Load(v.key(base))
	vs, _ := e.(variants)
	return vs.names, vs.gen
}

func (v *varyIndex) put(base string, names []string, gen uint64) {
	k := v.key(base)
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(names) == 0 {
		if _, had := v.names.LoadAndDelete(k); had {
			v.n--
		}
		return
	}
	if _, had := v.names.Swap(k, variants{names, gen}); had {
		return
	}
	if v.n++; v.n > varyIndexMax {
		v.names.Clear()
		v.names.Store(k, variants{names, gen})
		v.n = 1
	}
}

// generationBase is what the variant keys of base's generation gen
// extend (see variantKey). A base's variants are reached only through
// the marker stored under base, which names their Vary and generation
// (the Version of the marker, drawn when a render makes it): an
// invalidation deletes that one key, and every variant of the URL,
// whatever header values clients sent, is out of reach at once; the next
// render makes a new marker and a new generation, and the old variants
// expire unread. No request's key can be one: key lines of headers are
// "\nName: value" and of Vary "\nvary Name: value", and a path or query
// holds no newline.
func generationBase(base string, gen uint64) string {
	return base + "\ngeneration " + strconv.FormatUint(gen, 36)
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

// parseVary is httprule.ParseVary: the canonical header names of a
// response's Vary fields, sorted and without duplicates; star reports
// "Vary: *".
func parseVary(h http.Header) (names []string, star bool) { return httprule.ParseVary(h) }
