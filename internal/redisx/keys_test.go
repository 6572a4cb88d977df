package redisx_test

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/hotkv/stampede/internal/redisx"
)

// TestTag_sha256 (issue 10, #10): keys that are hashed (long, with braces,
// spaces or bytes that are not printable, or starting with "#") are
// reduced to the SHA-256 of the whole key, not to a fast hash whose
// collisions an attacker could craft; distinct keys get distinct tags, and
// no hashed tag equals a plain key.
func TestTag_sha256(t *testing.T) {
	long := strings.Repeat("k", redisx.MaxPlainKey+1)
	keys := []string{
		long, long + "x", "GET http://a.example/?q=1", "GET http://a.example/?q=2", "a{b}", "a}b", "\x00", "\x00\x00",
		"#", "#plain", "ünïcödé", "a b", "a\tb", "a\nb",
	}
	seen := map[string]string{}
	for _, k := range keys {
		got := redisx.Tag(k)
		sum := sha256.Sum256([]byte(k))
		if want := "#" + hex.EncodeToString(sum[:]); got != want {
			t.Errorf("Tag(%q) = %q, want %q", k, got, want)
		}
		if other, ok := seen[got]; ok {
			t.Errorf("Tag(%q) = Tag(%q) = %q", k, other, got)
		}
		seen[got] = k
		if redisx.Tag(got) == got {
			t.Errorf("the tag %q is kept as a plain key: a user key could take a hashed key's place", got)
		}
	}
}

func TestSibling(t *testing.T) {
	tests := []struct {
		name, key, want string
		ok              bool
	}{
		{"plain", "orders:42", "{orders:42}:fence", true},
		{"tagged", "orders:{42}", "orders:{42}:fence", true},
		{"tag only", "{42}", "{42}:fence", true},
		{"open brace", "a{b", "{a{b}:fence", true},
		{"empty tag", "a{}b", "a{}b:fence", false},
		{"close brace", "a}b", "a}b:fence", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := redisx.Sibling(tt.key, "fence")
			if got != tt.want || ok != tt.ok {
				t.Fatalf("Sibling(%q) = %q, %t; want %q, %t", tt.key, got, ok, tt.want, tt.ok)
			}
			if ok && redisx.HashTag(got) != redisx.HashTag(tt.key) {
				t.Errorf("slot tags differ: %q vs %q", redisx.HashTag(got), redisx.HashTag(tt.key))
			}
		})
	}
}

func TestTag(t *testing.T) {
	long := strings.Repeat("k", redisx.MaxPlainKey+1)
	tests := []struct {
		name, key string
		plain     bool
	}{
		{"plain", "user:42", true},
		{"braces", "a{b}", false},
		{"space", "a b", false},
		{"binary", "\x00\x01", false},
		{"long", long, false},
		{"looks hashed", "#abc", false},
		{"empty", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := redisx.Tag(tt.key)
			if (got == tt.key) != tt.plain {
				t.Fatalf("Tag(%q) = %q, plain %t", tt.key, got, tt.plain)
			}
			if !tt.plain && (len(got) != 65 || strings.ContainsAny(got, "{}")) {
				t.Errorf("Tag(%q) = %q, want # and 64 hex", tt.key, got)
			}
		})
	}
	if redisx.Tag(long) == redisx.Tag(long+"x") {
		t.Error("distinct long keys share a tag")
	}
}
