package compress_test

import (
	"fmt"
	"log"
	"strings"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/compress"
	"github.com/redis/go-redis/v9"
)

func ExampleS2() {
	codec := compress.S2(cache.Msgpack, nil) // compress encodings of 64 bytes or more
	// In a program: cache.New(rdb, &cache.Options{Codec: codec}).

	page := strings.Repeat(`<li class="item">product</li>`, 100)
	b, err := codec.Marshal(page)
	if err != nil {
		panic(err)
	}
	plain, _ := cache.Msgpack.Marshal(page)
	fmt.Printf("framed: %t, smaller: %t\n", b[0] == 0xc1, len(b) < len(plain)/10)

	var got string
	if err := codec.Unmarshal(b, &got); err != nil {
		panic(err)
	}
	fmt.Println(got == page)

	// Short values, and entries written before the wrapper was added, are
	// the inner codec's bytes: both sides read them.
	small, _ := codec.Marshal("hi")
	var s string
	_ = cache.Msgpack.Unmarshal(small, &s)
	fmt.Println(s)
	// Output:
	// framed: true, smaller: true
	// true
	// hi
}

// The snippet of docs/cache.md (docs_test.go checks it). Compiled, not
// run: it connects to a server on localhost:6379.
func Example_cache() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	c, err := cache.New(rdb, &cache.Options{
		Codec: compress.S2(cache.Msgpack, nil), // or compress.Zstd(...), or compress.New(inner, opts) for an error instead of a panic
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
}
