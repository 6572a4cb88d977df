package codec_test

import (
	"testing"

	"github.com/hotkv/stampede/internal/codec"
)

func TestFailure_roundTrip(t *testing.T) {
	for _, tc := range []struct{ token, text string }{
		{"0123456789abcdef0123456789abcdef", "cache: load \"k\": upstream answered 503"},
		{"0123456789abcdef0123456789abcdef", ""},
		{"t", "text with \x00 and \xff bytes"},
	} {
		token, text, ok := codec.DecodeFailure([]byte(codec.EncodeFailure(tc.token, tc.text)))
		if !ok || token != tc.token || text != tc.text {
			t.Errorf("round trip of %q, %q: %q, %q, %v", tc.token, tc.text, token, text, ok)
		}
	}
}

func TestDecodeFailure_rejects(t *testing.T) {
	good := codec.EncodeFailure("0123456789abcdef0123456789abcdef", "err")
	for _, tc := range []struct{ name, b string }{
		{"empty", ""},
		{"short", good[:2]},
		{"token cut short", good[:10]},
		{"no token", "\xF6\x01\x00err"},
		{"future version", good[:1] + "\x02" + good[2:]},
		{"an entry", string(codec.Append(nil, codec.Entry{Payload: []byte("x")}))},
		{"lock value", "0123456789abcdef0123456789abcdef;1700000000000;"},
	} {
		if token, text, ok := codec.DecodeFailure([]byte(tc.b)); ok {
			t.Errorf("%s: DecodeFailure(%q) = %q, %q; want no marker", tc.name, tc.b, token, text)
		}
	}
	if _, err := codec.Decode([]byte(good)); err == nil || codec.IsEntry([]byte(good)) {
		t.Errorf("a failure marker decodes as an entry")
	}
}

func FuzzDecodeFailure(f *testing.F) {
	f.Add([]byte(codec.EncodeFailure("0123456789abcdef0123456789abcdef", "err")))
	f.Add([]byte{0xF6, 1, 0})
	f.Add([]byte{0xF6, 1, 200, 'x'})
	f.Fuzz(func(t *testing.T, b []byte) {
		token, text, ok := codec.DecodeFailure(b)
		if !ok {
			return
		}
		// Whatever decodes must encode back to the same bytes.
		if again := codec.EncodeFailure(token, text); again != string(b) {
			t.Errorf("re-encoding changed %x to %x", b, again)
		}
	})
}
