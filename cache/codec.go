package cache

import (
	"encoding/json"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// Codec turns values into bytes and back. Implementations must be safe for
// concurrent use.
type Codec interface {
	Marshal(v any) ([]byte, error)
	// Unmarshal decodes b into the value v points to.
	Unmarshal(b []byte, v any) error
}

// Msgpack encodes values with github.com/vmihailenco/msgpack/v5. It is the
// default codec.
var Msgpack Codec = msgpackCodec{}

// JSON encodes values with encoding/json.
var JSON Codec = jsonCodec{}

// Raw stores []byte and string values as they are, without encoding; any
// other type is an error.
var Raw Codec = rawCodec{}

type msgpackCodec struct{}

func (msgpackCodec) Marshal(v any) ([]byte, error)   { return msgpack.Marshal(v) }
func (msgpackCodec) Unmarshal(b []byte, v any) error { return msgpack.Unmarshal(b, v) }

type jsonCodec struct{}

func (jsonCodec) Marshal(v any) ([]byte, error)   { return json.Marshal(v) }
func (jsonCodec) Unmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	switch v := v.(type) {
	case []byte:
		return v, nil
	case string:
		return []byte(v), nil
	}
	return nil, fmt.Errorf("cache: Raw codec cannot encode %T (only []byte and string)", v)
}

func (rawCodec) Unmarshal(b []byte, v any) error {
	switch v := v.(type) {
	case *[]byte:
		*v = append((*v)[:0], b...)
		return nil
	case *string:
		*v = string(b)
		return nil
	}
	return fmt.Errorf("cache: Raw codec cannot decode into %T (only *[]byte and *string)", v)
}
