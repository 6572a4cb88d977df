package redisx_test

import (
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
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

// TestTag_plainBytes: Tag keeps a key as written exactly when every byte
// is printable ASCII other than a brace (and it does not start with "#"),
// whatever the byte and wherever it is: in the eight-byte words Tag reads
// or in the bytes after them, next to other bytes that are on the edges.
func TestTag_plainBytes(t *testing.T) {
	plainByte := func(c byte) bool { return c >= 0x21 && c <= 0x7e && c != '{' && c != '}' }
	want := func(k string) bool {
		for i := 0; i < len(k); i++ {
			if !plainByte(k[i]) {
				return false
			}
		}
		return !strings.HasPrefix(k, "#")
	}
	check := func(k string) {
		t.Helper()
		if got := redisx.Tag(k) == k; got != want(k) {
			t.Fatalf("Tag(%q) kept as written: %t, want %t", k, got, want(k))
		}
	}
	for n := 1; n <= 24; n++ {
		for i := range n {
			for c := range 256 {
				k := []byte(strings.Repeat("a", n))
				k[i] = byte(c)
				check(string(k))
			}
		}
	}
	// Keys of bytes near the edges, each beside the others, so that a
	// borrow or carry from one byte could hide another.
	// Mostly plain ones, so that many keys are plain throughout.
	plainEdges := []byte{0x21, 0x22, 0x7a, 0x7c, 0x7e, '#', 'a'}
	otherEdges := []byte{0x00, 0x01, 0x20, '{', '}', 0x7f, 0x80, 0xa1, 0xfb, 0xfd, 0xff}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200_000 {
		k := make([]byte, rng.IntN(33))
		for i := range k {
			if rng.IntN(20) == 0 {
				k[i] = otherEdges[rng.IntN(len(otherEdges))]
			} else {
				k[i] = plainEdges[rng.IntN(len(plainEdges))]
			}
		}
		check(string(k))
	}
}
