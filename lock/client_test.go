package lock_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"strings"
	"testing"

	"github.com/hotkv/stampede/internal/redisx"
	"github.com/hotkv/stampede/lock"
)

// TestCapabilities_mirror: Capabilities and its strategies are lock's own
// types, converted from and to internal/redisx's by redisx.Mirror, so the
// two must have the same fields and the same strategies, numbered alike.
func TestCapabilities_mirror(t *testing.T) {
	pub, in := reflect.TypeFor[lock.Capabilities](), reflect.TypeFor[redisx.Capabilities]()
	for _, pair := range [][2]reflect.Type{{pub, in}, {in, pub}} {
		for _, f := range reflect.VisibleFields(pair[0]) {
			g, ok := pair[1].FieldByName(f.Name)
			if f.IsExported() && (!ok || g.Type.Kind() != f.Type.Kind()) {
				t.Errorf("%v has the field %s %v; %v has no such field of that kind", pair[0], f.Name, f.Type, pair[1])
			}
		}
	}

	full := lock.Capabilities{Server: "redis", Version: "8.6.3",
		Release: lock.ReleaseDelex, Extend: lock.ExtendSetIfEq, Digest: lock.DigestNative, DelIfEq: true,
		ScriptsDenied: "s", ACLRefused: "a", AnnounceDenied: "n", HandoffDenied: "h", NearDenied: "c"}
	v := reflect.ValueOf(full)
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Fatalf("the test's Capabilities leaves %s zero: set it", v.Type().Field(i).Name)
		}
	}
	back := redisx.Mirror[lock.Capabilities](redisx.Mirror[redisx.Capabilities](full))
	if back != full {
		t.Errorf("round trip through redisx.Capabilities: %+v, want %+v", back, full)
	}
	if got, want := full.String(), redisx.Mirror[redisx.Capabilities](full).String(); got != want {
		t.Errorf("String() = %q, want redisx's %q", got, want)
	}

	strategies := []struct {
		name     string
		pub, in  func(uint8) fmt.Stringer
		declared []fmt.Stringer // lock's constants, in order
	}{
		{"ReleaseStrategy",
			func(i uint8) fmt.Stringer { return lock.ReleaseStrategy(i) }, func(i uint8) fmt.Stringer { return redisx.ReleaseStrategy(i) },
			[]fmt.Stringer{lock.ReleaseLua, lock.ReleaseDelIfEq, lock.ReleaseDelex}},
		{"ExtendStrategy",
			func(i uint8) fmt.Stringer { return lock.ExtendStrategy(i) }, func(i uint8) fmt.Stringer { return redisx.ExtendStrategy(i) },
			[]fmt.Stringer{lock.ExtendLua, lock.ExtendSetIfEq}},
		{"DigestStrategy",
			func(i uint8) fmt.Stringer { return lock.DigestStrategy(i) }, func(i uint8) fmt.Stringer { return redisx.DigestStrategy(i) },
			[]fmt.Stringer{lock.DigestLua, lock.DigestNative}},
	}
	for _, s := range strategies {
		n := 0 // the strategies redisx names (its String knows them)
		for ; !strings.HasPrefix(s.in(uint8(n)).String(), s.name+"("); n++ {
			if s.pub(uint8(n)).String() != s.in(uint8(n)).String() {
				t.Errorf("%s(%d) is %v in lock, %v in redisx", s.name, n, s.pub(uint8(n)), s.in(uint8(n)))
			}
		}
		if len(s.declared) != n {
			t.Errorf("lock declares %v of type %s; redisx has %d strategies", s.declared, s.name, n)
		}
		for i, c := range s.declared {
			if c.String() != s.in(uint8(i)).String() {
				t.Errorf("lock's %s constant %d is %v, redisx's is %v", s.name, i, c, s.in(uint8(i)))
			}
		}
	}
}

// TestCapabilities_documented: every field of Capabilities and every
// strategy constant has a doc comment of its own.
func TestCapabilities_documented(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "capabilities.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.ValueSpec:
			if n.Doc.Text() == "" {
				t.Errorf("constant %s has no doc comment", n.Names[0].Name)
			}
		case *ast.StructType:
			for _, fld := range n.Fields.List {
				if fld.Doc.Text() == "" {
					t.Errorf("field %s of Capabilities has no doc comment", fld.Names[0].Name)
				}
			}
		}
		return true
	})
}
