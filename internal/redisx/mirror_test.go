package redisx_test

import (
	"strings"
	"testing"

	"github.com/hotkv/stampede/internal/redisx"
)

// TestMirror: fields are copied by name and converted; a field that the
// target lacks, or has of another kind, panics rather than being dropped.
func TestMirror(t *testing.T) {
	type strategy uint8
	type public struct {
		Server  string
		Release strategy
		DelIfEq bool
	}
	got := redisx.Mirror[public](struct {
		Server  string
		Release redisx.ReleaseStrategy
		DelIfEq bool
		private int
	}{"valkey", redisx.ReleaseDelIfEq, true, 1})
	if want := (public{"valkey", strategy(redisx.ReleaseDelIfEq), true}); got != want {
		t.Errorf("Mirror = %+v, want %+v", got, want)
	}

	for name, src := range map[string]any{
		"missing field": struct{ Extra string }{"x"},
		"other kind":    struct{ Release string }{"x"},
	} {
		func() {
			defer func() {
				if r, _ := recover().(string); !strings.Contains(r, "redisx.Mirror") {
					t.Errorf("%s: recovered %q, want Mirror's panic", name, r)
				}
			}()
			redisx.Mirror[public](src)
		}()
	}
}
