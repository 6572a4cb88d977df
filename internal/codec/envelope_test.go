package codec_test

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/codec"
)

func TestAppendDecode_roundTrip(t *testing.T) {
	now := time.UnixMilli(time.Now().UnixMilli())
	tests := []struct {
		name string
		e    codec.Entry
	}{
		{"value", codec.Entry{Written: now, FreshUntil: now.Add(time.Minute), LoadTime: 1500 * time.Microsecond, Payload: []byte("payload")}},
		{"not found", codec.Entry{Written: now, FreshUntil: now.Add(time.Second), NotFound: true, Payload: []byte{}}},
		{"empty payload", codec.Entry{Written: now, FreshUntil: now, Payload: []byte{}}},
		{"no stale window", codec.Entry{Written: now, FreshUntil: now.Add(time.Second), NoStale: true, Payload: []byte("v")}},
		{"not found, no stale window", codec.Entry{Written: now, FreshUntil: now, NotFound: true, NoStale: true, Payload: []byte{}}},
		{"tagged", codec.Entry{Written: now, FreshUntil: now.Add(time.Second), Payload: []byte("v"),
			Tags: []codec.TagRef{{Name: "user:42", Hard: 1, Soft: 2}, {Name: "", Hard: 1<<64 - 1}}}},
		{"tagged not found, empty payload", codec.Entry{Written: now, NotFound: true, Payload: []byte{},
			Tags: []codec.TagRef{{Name: strings.Repeat("t", codec.MaxTagLen), Soft: 7}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := codec.Append(nil, tt.e)
			if len(b) != codec.Size(tt.e) {
				t.Errorf("len(Append) = %d, Size = %d", len(b), codec.Size(tt.e))
			}
			got, err := codec.Decode(b)
			if err != nil {
				t.Fatal(err)
			}
			if !got.Written.Equal(tt.e.Written) || !got.FreshUntil.Equal(tt.e.FreshUntil) || got.LoadTime != tt.e.LoadTime ||
				got.NotFound != tt.e.NotFound || got.NoStale != tt.e.NoStale || !bytes.Equal(got.Payload, tt.e.Payload) ||
				!slices.Equal(got.Tags, tt.e.Tags) {
				t.Errorf("round trip: got %+v, want %+v", got, tt.e)
			}
		})
	}
}

func TestDecode_rejects(t *testing.T) {
	good := codec.Append(nil, codec.Entry{Payload: []byte("x")})
	tagged := codec.Append(nil, codec.Entry{Tags: []codec.TagRef{{Name: "tagname", Hard: 1, Soft: 2}}})
	tests := []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"short", good[:10]},
		{"other magic", append([]byte{'{'}, good[1:]...)},
		{"future version", append([]byte{good[0], 2}, good[2:]...)},
		{"unknown flag", append(append([]byte{}, good[:2]...), append([]byte{0x80}, good[3:]...)...)},
		{"lock value", []byte("0123456789abcdef0123456789abcdef;1700000000000;")},
		{"tags flag without tags", append(append([]byte{}, good[:2]...), append([]byte{4}, good[3:23]...)...)},
		{"no tags counted", append(append(append([]byte{}, good[:2]...), append([]byte{4}, good[3:23]...)...), 0, 'x')},
		{"tag cut short", tagged[:len(tagged)-2]},
		{"tag name cut short", tagged[:23+1+2+3]},
		{"tag longer than MaxTagLen", append(append([]byte{}, tagged[:24]...), 0xff, 0xff)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := codec.Decode(tt.b); !errors.Is(err, codec.ErrFormat) {
				t.Errorf("Decode(%q) = %v, want ErrFormat", tt.b, err)
			}
		})
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(codec.Append(nil, codec.Entry{Payload: []byte("x")}))
	f.Add([]byte{0xF5, 1})
	f.Add(codec.Append(nil, codec.Entry{Tags: []codec.TagRef{{Name: "t", Hard: 1, Soft: 2}}, Payload: []byte("x")}))
	f.Add([]byte("0123456789abcdef0123456789abcdef;1;meta"))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := codec.Decode(b)
		if err != nil {
			return
		}
		// Whatever decodes must encode back to the same bytes.
		if again := codec.Append(nil, e); !bytes.Equal(again, b) {
			t.Errorf("re-encoding changed %x to %x", b, again)
		}
	})
}
