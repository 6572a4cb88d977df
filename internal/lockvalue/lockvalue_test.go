package lockvalue_test

import (
	"strings"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/lockvalue"
)

func TestEncode_decodes(t *testing.T) {
	since := time.UnixMilli(1700000000123)
	for _, meta := range []string{"", "pod-7", "a;b;c"} {
		token := lockvalue.NewToken()
		got, ok := lockvalue.Decode(lockvalue.Encode(token, since, meta))
		if !ok || got.Token != token || !got.Since.Equal(since) || got.Metadata != meta {
			t.Errorf("Decode(Encode(%q, %v, %q)) = %+v, %v", token, since, meta, got, ok)
		}
	}
}

// FuzzDecode: whatever Decode accepts has a token of TokenLen characters
// at its start and its metadata at its end. (Named FuzzParseValue in
// package lock before; its corpus moved with it.)
func FuzzDecode(f *testing.F) {
	f.Add("0123456789abcdef0123456789abcdef;1700000000000;meta")
	f.Add("0123456789abcdef0123456789abcdef;;")
	f.Add("")
	f.Fuzz(func(t *testing.T, v string) {
		val, ok := lockvalue.Decode(v)
		if !ok {
			return
		}
		if len(val.Token) != lockvalue.TokenLen || !strings.HasSuffix(v, val.Metadata) || !strings.HasPrefix(v, val.Token+";") {
			t.Errorf("Decode(%q) = %+v", v, val)
		}
	})
}
