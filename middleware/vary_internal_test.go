package middleware

import (
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestVaryIndex_boundedKeys: the vary index keeps up to varyIndexMax base
// keys, and a base key can be as long as a request target and its keyed
// headers (about a megabyte); it held each whole, so up to ~10 GB. It is
// keyed by a fixed-size hash now, so its keys take at most
// varyIndexMax times that size, however long the base keys.
func TestVaryIndex_boundedKeys(t *testing.T) {
	var v varyIndex
	long := "GET http://example.com/" + strings.Repeat("a", 1<<20)
	v.put(long, []string{"Accept-Encoding"}, 1)
	v.put(long+"b", []string{"X-User"}, 2)
	if got, gen := v.get(long); !slices.Equal(got, []string{"Accept-Encoding"}) || gen != 1 {
		t.Errorf("get(long) = %q, generation %d", got, gen)
	}
	if got, gen := v.get(long + "b"); !slices.Equal(got, []string{"X-User"}) || gen != 2 {
		t.Errorf("get(long+b) = %q, generation %d", got, gen)
	}
	if got, _ := v.get(long + "c"); got != nil {
		t.Errorf("get of an unknown base = %q", got)
	}
	v.names.Range(func(k, _ any) bool {
		if _, ok := k.(uint64); !ok {
			t.Errorf("the index is keyed by %T: its size grows with the base keys", k)
		}
		return true
	})
	// Full, it forgets everything and starts again.
	for i := range varyIndexMax + 5 {
		v.put("GET http://example.com/"+strconv.Itoa(i), []string{"X-N"}, 0)
	}
	entries := 0
	v.names.Range(func(_, _ any) bool { entries++; return true })
	if entries > varyIndexMax || entries != v.n {
		t.Errorf("after %d puts: %d entries (counted %d), want at most %d", varyIndexMax+5, entries, v.n, varyIndexMax)
	}
	v.put(long, nil, 0)
	if got, _ := v.get(long); got != nil {
		t.Errorf("after put(long, nil): %q", got)
	}
}
