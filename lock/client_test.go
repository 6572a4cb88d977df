package lock_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"strings"
	"testing"

	"github.com/hotkv/stampede/lock"
)

// Capabilities and its strategies are aliases of internal/redisx's types,
// which go doc shows without fields or constants: the doc comment of
// Capabilities lists every field, and lock declares every strategy the
// internal types have. (It replaces internal/lockx's TestConversions,
// which checked the two copies these aliases replaced.)
func TestCapabilities_docListsFields(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "client.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string]string{}     // type name -> its doc comment
	consts := map[string][]string{} // strategy type -> the constants lock declares
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok {
			continue
		}
		for _, spec := range g.Specs {
			switch s := spec.(type) {
			case *ast.TypeSpec:
				docs[s.Name.Name] = g.Doc.Text()
			case *ast.ValueSpec:
				if id, ok := s.Type.(*ast.Ident); ok {
					consts[id.Name] = append(consts[id.Name], s.Names[0].Name)
				}
			}
		}
	}

	listed := map[string]bool{} // "Server, Version string // ..." lists Server and Version
	for _, line := range strings.Split(docs["Capabilities"], "\n") {
		if code, ok := strings.CutPrefix(line, "\t"); ok {
			decl, _, _ := strings.Cut(code, "//")
			words := strings.Fields(strings.ReplaceAll(decl, ",", " "))
			for _, n := range words[:max(len(words)-1, 0)] {
				listed[n] = true
			}
		}
	}
	for _, fld := range reflect.VisibleFields(reflect.TypeFor[lock.Capabilities]()) {
		if !listed[fld.Name] {
			t.Errorf("the doc comment of lock.Capabilities does not list the field %s", fld.Name)
		}
	}

	for _, s := range []struct {
		name   string
		values func(uint8) fmt.Stringer
	}{
		{"ReleaseStrategy", func(i uint8) fmt.Stringer { return lock.ReleaseStrategy(i) }},
		{"ExtendStrategy", func(i uint8) fmt.Stringer { return lock.ExtendStrategy(i) }},
		{"DigestStrategy", func(i uint8) fmt.Stringer { return lock.DigestStrategy(i) }},
	} {
		n := 0 // the strategies the type names (String knows them)
		for ; !strings.HasPrefix(s.values(uint8(n)).String(), s.name+"("); n++ {
		}
		if len(consts[s.name]) != n {
			t.Errorf("lock declares %v of type %s; the type has %d strategies", consts[s.name], s.name, n)
		}
	}
}
