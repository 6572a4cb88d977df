package middleware

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestVaryIndex_boundedKeys: the vary index keeps up to varyIndexMax base
// keys, and a base key can be as long as a request target and its keyed
// headers (about a megabyte); it held each whole, so up to ~10 GB. It is
// keyed by a fixed-size digest now, so its keys take at most
// varyIndexMax times that size, however long the base keys.
func TestVaryIndex_boundedKeys(t *testing.T) {
	var v varyIndex
	long := "GET http://example.com/" + strings.Repeat("a", 1<<20)
	v.put(long, []string{"Accept-Encoding"})
	v.put(long+"b", []string{"X-User"})
	if got := v.get(long); !slices.Equal(got, []string{"Accept-Encoding"}) {
		t.Errorf("get(long) = %q", got)
	}
	if got := v.get(long + "b"); !slices.Equal(got, []string{"X-User"}) {
		t.Errorf("get(long+b) = %q", got)
	}
	if got := v.get(long + "c"); got != nil {
		t.Errorf("get of an unknown base = %q", got)
	}
	k := reflect.TypeOf(v.names).Key()
	if k.Kind() != reflect.Array || k.Size() > 64 {
		t.Errorf("the index is keyed by %v: its size grows with the base keys", k)
	}
	v.put(long, nil)
	if got := v.get(long); got != nil {
		t.Errorf("after put(long, nil): %q", got)
	}
}
