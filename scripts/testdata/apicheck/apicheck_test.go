package main

import (
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// sources are two packages of a module example.com/m: a public one, and an
// internal one that its API reaches.
var sources = map[string]string{
	"example.com/m/internal/x": `package x

type Caps struct {
	Server string
	n      int
}

func (Caps) String() string { return "" }

type View interface{ Peek(key string) (Found, error) }

type Found struct{ Raw []byte }

type unreachable struct{ A int }
`,
	"example.com/m/p": `package p

import (
	"context"
	"example.com/m/internal/x"
)

const Max = 1 << 16

const Name string = "p"

var ErrX error

type Caps = x.Caps

type Number interface{ ~int | ~int64 }

type Func[V any] func(ctx context.Context) (V, error)

type Cache[V any] struct {
	Codec interface{}
	inner
	hidden int
}

type inner struct{ Size int }

func (inner) Len() int { return 0 }

func (c *Cache[T]) Get(ctx context.Context, key string) (T, error) { var v T; return v, nil }

func (c *Cache[V]) Engine() x.View { return nil }

type Option func(*settings)

type settings struct{ ttl int }

type Iface interface {
	Do(ctx context.Context, args ...any) error
	private()
}

type Both interface {
	Iface
	x.View
}

func GetOrLoad[V any](ctx context.Context, c *Cache[V], key string, load Func[V], opts ...Option) (V, error) {
	return load(ctx)
}

func Sum[N Number](ns ...N) (total N) { return }

func Send(ch chan<- int, rx <-chan <-chan int, both chan (<-chan int)) {}

func unexported() {}
`,
}

// typeCheck type-checks the package path of sources.
func typeCheck(t *testing.T, path string) *types.Package {
	t.Helper()
	fset := token.NewFileSet()
	done := map[string]*types.Package{}
	std := importer.ForCompiler(fset, "source", nil)
	var check func(path string) (*types.Package, error)
	imp := importerFunc(func(path string) (*types.Package, error) {
		if _, ok := sources[path]; ok {
			return check(path)
		}
		return std.Import(path)
	})
	check = func(path string) (*types.Package, error) {
		if p, ok := done[path]; ok {
			return p, nil
		}
		f, err := parser.ParseFile(fset, path+".go", sources[path], 0)
		if err != nil {
			return nil, err
		}
		p, err := (&types.Config{Importer: imp}).Check(path, fset, []*ast.File{f}, nil)
		done[path] = p
		return p, err
	}
	p, err := check(path)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

type importerFunc func(path string) (*types.Package, error)

func (f importerFunc) Import(path string) (*types.Package, error) { return f(path) }

func TestListing(t *testing.T) {
	got := listing(typeCheck(t, "example.com/m/p"), "example.com/m")
	want := []string{
		"const Max untyped int = 65536",
		`const Name string = "p"`,
		"func GetOrLoad[V any](context.Context, *Cache[V], string, Func[V], ...Option) (V, error)",
		"func Send(chan<- int, <-chan <-chan int, chan (<-chan int))",
		"func Sum[N Number](...N) N",
		"method (*Cache[T]) Get(context.Context, string) (T, error)",
		"method (*Cache[V]) Engine() x.View",
		"method (Cache[V]) Len() int",
		"method (inner) Len() int",
		"method (x.Caps) String() string",
		"type Cache[V any] struct",
		"type Cache[V any] struct, Codec any",
		"type Cache[V any] struct, embedded inner",
		"type Caps = x.Caps",
		"type Func[V any] func(context.Context) (V, error)",
		"type Both interface",
		"type Both interface, Do(context.Context, ...any) error",
		"type Both interface, Peek(string) (x.Found, error)",
		"type Both interface, embedded Iface",
		"type Both interface, embedded x.View",
		"type Both interface, unexported methods",
		"type Iface interface",
		"type Iface interface, Do(context.Context, ...any) error",
		"type Iface interface, unexported methods",
		"type Number interface{ ~int | ~int64 }",
		"type Option func(*settings)",
		"type inner struct",
		"type inner struct, Size int",
		"type x.Caps struct",
		"type x.Caps struct, Server string",
		"type x.Found struct",
		"type x.Found struct, Raw []byte",
		"type x.View interface",
		"type x.View interface, Peek(string) (x.Found, error)",
		"var ErrX error",
	}
	for i := range want {
		want[i] = "pkg example.com/m/p, " + want[i]
	}
	slices.Sort(want)
	if removed, added := diff(want, got); len(removed)+len(added) > 0 {
		t.Errorf("listing differs from the expected:\nmissing:\n%s\nunexpected:\n%s",
			strings.Join(removed, "\n"), strings.Join(added, "\n"))
	}
}

func TestUnreleased(t *testing.T) {
	file := filepath.Join(t.TempDir(), "CHANGELOG.md")
	for _, c := range []struct {
		text  string
		found bool
		words []string
	}{
		// No section above the tag's.
		{"# Changelog\n\n## v0.1.0 (2026-01-01)\n\n### cache\n", false, nil},
		{"# Changelog\n\n### cache\n", false, nil},
		// An empty one.
		{"## Unreleased\n\n## v0.1.0 (2026-01-01)\n\n### cache\n", true, nil},
		{"## Unreleased (will be v0.2.0)\n\n### lock\n\n- x\n\n### metrics (new), stampedeprom\n\n## v0.1.0\n\n### cache\n", true,
			[]string{"lock", "metrics", "new", "stampedeprom"}},
		// The commit that releases v0.2.0.
		{"# Changelog\n\n## v0.2.0 (2026-02-01)\n\n### metricstest\n\n## v0.1.0\n\n### cache\n", true, []string{"metricstest"}},
	} {
		if err := os.WriteFile(file, []byte(c.text), 0o644); err != nil {
			t.Fatal(err)
		}
		words, found := unreleased(file, "v0.1.0")
		var got []string
		for w := range words {
			got = append(got, w)
		}
		slices.Sort(got)
		if found != c.found || fmt.Sprint(got) != fmt.Sprint(c.words) {
			t.Errorf("unreleased(%q) = %v, %v; want %v, %v", c.text, got, found, c.words, c.found)
		}
	}
}
