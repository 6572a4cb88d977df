package redisx_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/redisx"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/zeebo/xxh3"
)

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
