package redisx

import (
	"fmt"
	"reflect"
)

// Mirror returns the struct src as a value of the struct type T, field by
// field by name, each field converted to T's type for it (of the same
// kind). It is the one
// conversion between this package's Capabilities and the public
// lock.Capabilities, in both directions: package lock declares its own
// types, with their docs, and this package keeps its own, so the field
// lists must match and the strategies (uint8s) be numbered alike, which
// lock's TestCapabilities_mirror checks. It panics when T lacks one of
// src's exported fields or cannot convert it.
func Mirror[T any](src any) T {
	var dst T
	d := reflect.ValueOf(&dst).Elem()
	s := reflect.ValueOf(src)
	for i := range s.NumField() {
		f := s.Type().Field(i)
		if !f.IsExported() {
			continue
		}
		to := d.FieldByName(f.Name)
		if !to.IsValid() || to.Kind() != f.Type.Kind() || !f.Type.ConvertibleTo(to.Type()) {
			panic(fmt.Sprintf("redisx.Mirror: %T has no field %s of the kind of %s", dst, f.Name, f.Type))
		}
		to.Set(s.Field(i).Convert(to.Type()))
	}
	return dst
}
