package redisx_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/redistest"
	"github.com/hotkv/stampede/internal/redisx"
	"github.com/zeebo/xxh3"
)

func TestMain(m *testing.M) { redistest.Main(m, nil) }

func TestDigest_known(t *testing.T) {
	if got := redisx.Digest("Hello world"); got != "b6acb9d84a38ff74" {
		t.Errorf("Digest(Hello world) = %s, want b6acb9d84a38ff74", got)
	}
}

// TestDigest_matchesServer compares Digest with the server's DIGEST for
// many values, including values whose hash starts with zero nibbles, where
// a digest that is not zero padded would differ.
func TestDigest_matchesServer(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	rc := s.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	values := []string{"", "a", "Hello world", strings.Repeat("x", 100000), "\x00\xff\x01binary"}
	for i := 0; len(values) < 400; i++ {
		v := fmt.Sprintf("value-%d", i)
		h := xxh3.HashString(v)
		if i < 200 || h < 1<<56 { // after 200 plain ones, keep only hashes with 2+ leading zero nibbles
			values = append(values, v)
		}
	}
	zeros := 0
	key := redistest.Key(t, "digest")
	for _, v := range values {
		if err := rc.Set(ctx, key, v, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		want, err := rc.Do(ctx, "DIGEST", key).Text()
		if err != nil {
			t.Fatal(err)
		}
		got := redisx.Digest(v)
		if got != want {
			t.Errorf("Digest(%.20q) = %s, server says %s", v, got, want)
		}
		if strings.HasPrefix(got, "00") {
			zeros++
		}
		// The same digest must make DELEX IFDEQ succeed.
		if n, err := rc.Do(ctx, "DELEX", key, "IFDEQ", got).Int(); err != nil || n != 1 {
			t.Fatalf("DELEX IFDEQ %s = %d, %v", got, n, err)
		}
	}
	if zeros < 50 {
		t.Fatalf("only %d values with a zero-padded digest were checked", zeros)
	}
}

func TestSHA1Hex_matchesServer(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		rc := s.Client(t)
		ctx := context.Background()
		for _, v := range []string{"", "abc", strings.Repeat("\x00z", 5000)} {
			got, err := rc.Eval(ctx, "return redis.sha1hex(ARGV[1])", nil, v).Text()
			if err != nil {
				t.Fatal(err)
			}
			if want := redisx.SHA1Hex(v); got != want {
				t.Errorf("sha1hex(%.10q): server %s, client %s", v, got, want)
			}
		}
	}, redistest.Redis7, redistest.Miniredis)
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

func TestIsRefused(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis7)
	rc := s.Client(t)
	ctx := context.Background()
	unknown := rc.Do(ctx, "DELEX", "k", "IFEQ", "v").Err()
	syntax := rc.Do(ctx, "SET", "k", "v", "IFEQ", "v").Err()
	nilErr := rc.Get(ctx, redistest.Key(t, "missing")).Err()
	if !redisx.IsUnknownCommand(unknown) || !redisx.IsRefused(unknown) {
		t.Errorf("DELEX on Redis 7: %v not seen as unknown command", unknown)
	}
	if redisx.IsUnknownCommand(syntax) || !redisx.IsRefused(syntax) {
		t.Errorf("SET IFEQ on Redis 7: %v not seen as refused", syntax)
	}
	if !redisx.IsNil(nilErr) || redisx.IsReply(nilErr) || redisx.IsRefused(nilErr) {
		t.Errorf("GET of a missing key: %v misclassified", nilErr)
	}
}

func TestIsTransport(t *testing.T) {
	s := redistest.Start(t, redistest.Redis7)
	rc := s.Client(t)
	ctx := context.Background()
	reply := rc.Do(ctx, "NOSUCHCOMMAND").Err()
	s.Kill()
	down := rc.Ping(ctx).Err()
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"server down", down, true},
		{"error reply", reply, false},
		{"nil reply", redisx.IsNilErrForTest(), false},
		{"cancelled", rc.Ping(cctx).Err(), false},
		{"client mistake", fmt.Errorf("ttl below 1ms"), false},
	}
	for _, tt := range tests {
		if got := redisx.IsTransport(tt.err); got != tt.want {
			t.Errorf("%s: IsTransport(%v) = %t, want %t", tt.name, tt.err, got, tt.want)
		}
	}
}
