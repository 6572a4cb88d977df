package main

import (
	"fmt"
	"go/types"
	"sort"
	"strconv"
	"strings"
)

// listing returns the exported API of pkg, one sorted line per exported
// name, method, field and interface method, in the manner of the Go
// project's api/go1.*.txt:
//
//	pkg github.com/hotkv/stampede/cache, func GetOrLoad[V any](context.Context, *Cache, string, loader.Func[V], ...Option) (V, error)
//	pkg github.com/hotkv/stampede/cache, method (*Cache) Close() error
//	pkg github.com/hotkv/stampede/cache, type Options struct, Codec Codec
//
// Parameter names are left out (they are not part of the API); type
// parameters keep theirs. Types of other packages are qualified by the
// package's name. Methods include those promoted through embedding.
//
// A type that the API reaches but that no listing declares, because it is
// unexported or in an internal package (an alias of an internal type, an
// internal interface a method returns, an unexported embedded struct), is
// hidden: its exported fields and methods are part of pkg's API all the
// same, so they are listed too, under its qualified name
// ("type engine.View interface, MaxValueSize() int"), when it has any
// and its package's path starts with repo.
func listing(pkg *types.Package, repo string) []string {
	l := &lister{pkg: pkg, repo: repo, seen: map[*types.TypeName]bool{}}
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		w := l.writer()
		switch obj := obj.(type) {
		case *types.Const:
			w.typ(obj.Type())
			l.emit("const %s %s = %s", name, w, obj.Val().ExactString())
		case *types.Var:
			w.typ(obj.Type())
			l.emit("var %s %s", name, w)
		case *types.Func:
			sig := obj.Type().(*types.Signature)
			w.typeParams(sig.TypeParams())
			w.signature(sig)
			l.emit("func %s%s", name, w)
		case *types.TypeName:
			l.seen[obj] = true
			l.typeLines(obj, name, false)
		}
	}
	// The hidden types, and those they reach in turn.
	for len(l.hidden) > 0 {
		obj := l.hidden[0]
		l.hidden = l.hidden[1:]
		l.typeLines(obj, l.writer().qualified(obj), true)
	}
	sort.Strings(l.lines)
	return l.lines
}

// A lister collects the lines of one package.
type lister struct {
	pkg    *types.Package
	repo   string
	lines  []string
	seen   map[*types.TypeName]bool
	hidden []*types.TypeName // to list
}

func (l *lister) emit(format string, args ...any) {
	l.lines = append(l.lines, "pkg "+l.pkg.Path()+", "+fmt.Sprintf(format, args...))
}

func (l *lister) writer() *typeWriter { return &typeWriter{pkg: l.pkg, found: l.found} }

// found is called with each defined type written; it queues the hidden
// ones of the repository.
func (l *lister) found(obj *types.TypeName) {
	p := obj.Pkg()
	if l.seen[obj] || p == nil || !strings.HasPrefix(p.Path(), l.repo) {
		return
	}
	if obj.Exported() && !internal(p.Path()) {
		return
	}
	l.seen[obj] = true
	l.hidden = append(l.hidden, obj)
}

// typeLines lists a type: its declaration, then one line per exported
// field (struct) or method (interface), and one per exported method in the
// method set of the type or of a pointer to it. A hidden type with none
// of those is not listed.
func (l *lister) typeLines(obj *types.TypeName, name string, hidden bool) {
	decl := "type " + name
	if alias, ok := obj.Type().(*types.Alias); ok {
		w := l.writer()
		w.typeParams(alias.TypeParams())
		w.s(" = ")
		w.typ(alias.Rhs())
		l.emit("%s%s", decl, w)
		return
	}
	named, ok := obj.Type().(*types.Named)
	if !ok { // not expected: a type name is an alias or a defined type
		l.emit("%s %s", decl, types.TypeString(obj.Type(), nil))
		return
	}
	head := l.writer()
	head.typeParams(named.TypeParams())
	decl += head.String()
	var lines []string
	switch u := named.Underlying().(type) {
	case *types.Struct:
		decl += " struct"
		for i := range u.NumFields() {
			f := u.Field(i)
			if !f.Embedded() && !f.Exported() {
				continue
			}
			w := l.writer()
			w.typ(f.Type())
			if f.Embedded() { // an unexported one promotes its exported fields and methods
				lines = append(lines, decl+", embedded "+w.String())
			} else {
				lines = append(lines, decl+", "+f.Name()+" "+w.String())
			}
		}
	case *types.Interface:
		if !u.IsMethodSet() { // a constraint: its type set in full
			w := l.writer()
			w.typ(u)
			l.emit("%s %s", decl, w)
			return
		}
		decl += " interface"
		unexported := false
		for i := range u.NumMethods() {
			m := u.Method(i)
			if !m.Exported() {
				unexported = true
				continue
			}
			w := l.writer()
			w.signature(m.Type().(*types.Signature))
			lines = append(lines, decl+", "+m.Name()+w.String())
		}
		if unexported {
			lines = append(lines, decl+", unexported methods")
		}
		for i := range u.NumEmbeddeds() { // what it can be used as
			w := l.writer()
			w.typ(u.EmbeddedType(i))
			lines = append(lines, decl+", embedded "+w.String())
		}
	default:
		w := l.writer()
		w.typ(u)
		decl += " " + w.String()
	}
	if _, ok := named.Underlying().(*types.Interface); !ok {
		lines = append(lines, l.methodLines(named, name)...)
	}
	if hidden && len(lines) == 0 {
		return
	}
	l.emit("%s", decl)
	for _, line := range lines {
		l.emit("%s", line)
	}
}

// methodLines lists the exported methods of *T's method set (which holds
// T's): "method (T) M(…)" for those a T has, "method (*T) M(…)" for those
// only a *T has.
func (l *lister) methodLines(named *types.Named, name string) []string {
	values := types.NewMethodSet(named)
	all := types.NewMethodSet(types.NewPointer(named))
	var lines []string
	for i := range all.Len() {
		sel := all.At(i)
		m := sel.Obj().(*types.Func)
		if !m.Exported() {
			continue
		}
		// The receiver's type parameters: the method's own names when T
		// declares it, else (promoted) T's.
		tparams := named.TypeParams()
		sig := sel.Type().(*types.Signature)
		if own := m.Type().(*types.Signature); len(sel.Index()) == 1 && own.RecvTypeParams().Len() > 0 {
			tparams = own.RecvTypeParams()
			sig = own
		}
		w := l.writer()
		w.s("method (")
		if values.Lookup(m.Pkg(), m.Name()) == nil {
			w.s("*")
		}
		w.s(name)
		if tparams.Len() > 0 {
			w.s("[")
			for j := range tparams.Len() {
				if j > 0 {
					w.s(", ")
				}
				w.s(tparams.At(j).Obj().Name())
			}
			w.s("]")
		}
		w.s(") " + m.Name())
		w.signature(sig)
		lines = append(lines, w.String())
	}
	return lines
}

// typeWriter writes types as Go source spells them, without parameter
// names, qualifying the names of other packages by the package's name.
type typeWriter struct {
	pkg   *types.Package
	found func(*types.TypeName) // called with each defined type written
	b     strings.Builder
}

func (w *typeWriter) String() string { return w.b.String() }

func (w *typeWriter) s(s string) { w.b.WriteString(s) }

// qualified returns the name of obj, qualified by its package's name
// when that is not the package listed.
func (w *typeWriter) qualified(obj types.Object) string {
	if p := obj.Pkg(); p != nil && p.Path() != w.pkg.Path() {
		return p.Name() + "." + obj.Name()
	}
	return obj.Name()
}

func (w *typeWriter) typeList(l *types.TypeList) {
	if l.Len() == 0 {
		return
	}
	w.s("[")
	for i := range l.Len() {
		if i > 0 {
			w.s(", ")
		}
		w.typ(l.At(i))
	}
	w.s("]")
}

// typeParams writes "[K comparable, V any]", or nothing.
func (w *typeWriter) typeParams(l *types.TypeParamList) {
	if l.Len() == 0 {
		return
	}
	w.s("[")
	for i := range l.Len() {
		if i > 0 {
			w.s(", ")
		}
		tp := l.At(i)
		w.s(tp.Obj().Name() + " ")
		c := tp.Constraint()
		if iface, ok := c.(*types.Interface); ok && iface.IsImplicit() {
			w.typ(iface.EmbeddedType(0)) // [T ~int | ~string]
		} else {
			w.typ(c)
		}
	}
	w.s("]")
}

// signature writes "(A, ...B) (C, error)" (a signature without "func").
func (w *typeWriter) signature(sig *types.Signature) {
	w.s("(")
	params := sig.Params()
	for i := range params.Len() {
		if i > 0 {
			w.s(", ")
		}
		t := params.At(i).Type()
		if sig.Variadic() && i == params.Len()-1 {
			w.s("...")
			if sl, ok := t.(*types.Slice); ok {
				t = sl.Elem()
			}
		}
		w.typ(t)
	}
	w.s(")")
	res := sig.Results()
	switch res.Len() {
	case 0:
	case 1:
		w.s(" ")
		w.typ(res.At(0).Type())
	default:
		w.s(" (")
		for i := range res.Len() {
			if i > 0 {
				w.s(", ")
			}
			w.typ(res.At(i).Type())
		}
		w.s(")")
	}
}

func (w *typeWriter) typ(t types.Type) {
	switch t := t.(type) {
	case *types.Basic:
		if t.Kind() == types.UnsafePointer {
			w.s("unsafe.")
		}
		w.s(t.Name())
	case *types.Pointer:
		w.s("*")
		w.typ(t.Elem())
	case *types.Slice:
		w.s("[]")
		w.typ(t.Elem())
	case *types.Array:
		w.s("[" + strconv.FormatInt(t.Len(), 10) + "]")
		w.typ(t.Elem())
	case *types.Map:
		w.s("map[")
		w.typ(t.Key())
		w.s("]")
		w.typ(t.Elem())
	case *types.Chan:
		switch t.Dir() {
		case types.SendOnly:
			w.s("chan<- ")
		case types.RecvOnly:
			w.s("<-chan ")
		default:
			w.s("chan ")
		}
		if c, ok := t.Elem().(*types.Chan); ok && t.Dir() == types.SendRecv && c.Dir() == types.RecvOnly {
			w.s("(")
			w.typ(c)
			w.s(")")
		} else {
			w.typ(t.Elem())
		}
	case *types.Signature:
		w.s("func")
		w.signature(t)
	case *types.Struct:
		if t.NumFields() == 0 {
			w.s("struct{}")
			return
		}
		w.s("struct{ ")
		for i := range t.NumFields() {
			if i > 0 {
				w.s("; ")
			}
			f := t.Field(i)
			if !f.Embedded() {
				w.s(f.Name() + " ")
			}
			if found := w.found; !f.Exported() { // part of the type, but out of reach
				w.found = nil
				w.typ(f.Type())
				w.found = found
			} else {
				w.typ(f.Type())
			}
			if tag := t.Tag(i); tag != "" {
				w.s(" " + strconv.Quote(tag))
			}
		}
		w.s(" }")
	case *types.Interface:
		if t.NumExplicitMethods()+t.NumEmbeddeds() == 0 {
			w.s("any") // as interface{} is spelt too
			return
		}
		w.s("interface{ ")
		n := 0
		for i := range t.NumExplicitMethods() {
			if n++; n > 1 {
				w.s("; ")
			}
			m := t.ExplicitMethod(i)
			w.s(m.Name())
			w.signature(m.Type().(*types.Signature))
		}
		for i := range t.NumEmbeddeds() {
			if n++; n > 1 {
				w.s("; ")
			}
			w.typ(t.EmbeddedType(i))
		}
		w.s(" }")
	case *types.Union:
		for i := range t.Len() {
			if i > 0 {
				w.s(" | ")
			}
			if t.Term(i).Tilde() {
				w.s("~")
			}
			w.typ(t.Term(i).Type())
		}
	case *types.TypeParam:
		w.s(t.Obj().Name())
	case *types.Alias:
		w.s(w.qualified(t.Obj()))
		w.typeList(t.TypeArgs())
	case *types.Named:
		if w.found != nil {
			w.found(t.Obj())
		}
		w.s(w.qualified(t.Obj()))
		if t.TypeArgs().Len() > 0 {
			w.typeList(t.TypeArgs())
		} else if tp := t.TypeParams(); tp.Len() > 0 {
			w.s("[")
			for i := range tp.Len() {
				if i > 0 {
					w.s(", ")
				}
				w.s(tp.At(i).Obj().Name())
			}
			w.s("]")
		}
	default:
		w.s(types.TypeString(t, func(p *types.Package) string { return p.Name() }))
	}
}
