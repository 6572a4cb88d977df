package middleware

import (
	"net/http"
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

// TestVaryValue: Accept-Language values that differ only in letter case
// or in the whitespace around commas select the same variant; other
// fields, several lines and different ranges do not.
func TestVaryValue(t *testing.T) {
	same := func(name string, a, b []string) bool {
		return varyValue(http.Header{name: a}, name) == varyValue(http.Header{name: b}, name)
	}
	for _, tt := range []struct {
		name string
		a, b []string
		want bool
	}{
		{"Accept-Language", []string{"en, de"}, []string{"eN, De"}, true},
		{"Accept-Language", []string{"en, de"}, []string{" en ,   de"}, true},
		{"Accept-Language", []string{"en-US,de;q=0.5"}, []string{"EN-us , de;Q=0.5"}, true},
		{"Accept-Language", []string{"en, de"}, []string{"de, en"}, false},
		{"Accept-Language", []string{"en"}, []string{"en-GB"}, false},
		{"Accept-Language", []string{"en, de"}, []string{"en", "de"}, false}, // lines are compared as they are
		{"Foo", []string{"1,2"}, []string{" 1, 2 "}, false},
		{"Foo", []string{"a"}, []string{"A"}, false},
		{"Foo", []string{" a "}, []string{"a"}, true}, // OWS around a field value is no part of it
	} {
		if got := same(tt.name, tt.a, tt.b); got != tt.want {
			t.Errorf("%s: %q and %q the same: %v, want %v (%q, %q)", tt.name, tt.a, tt.b, got, tt.want,
				varyValue(http.Header{tt.name: tt.a}, tt.name), varyValue(http.Header{tt.name: tt.b}, tt.name))
		}
	}
	for _, v := range []string{"en, DE", " a ,b", "x", ",", ", ,"} {
		once := varyValue(http.Header{"Accept-Language": {v}}, "Accept-Language")
		if twice := varyValue(http.Header{"Accept-Language": {once}}, "Accept-Language"); twice != once {
			t.Errorf("%q normalises to %q, then to %q", v, once, twice)
		}
	}
}
