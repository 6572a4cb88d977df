// Package sample makes the JSON-like values that tests and benchmarks
// store: records with repeated field names and varied contents drawn from
// a small vocabulary, as API responses are. The same size gives the same
// records on every call, so measurements of different libraries or codecs
// see the same bytes.
package sample

import (
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/vmihailenco/msgpack/v5"
)

// Doc is one record.
type Doc struct {
	ID    int      `json:"id" msgpack:"id"`
	Name  string   `json:"name" msgpack:"name"`
	Email string   `json:"email" msgpack:"email"`
	Tags  []string `json:"tags" msgpack:"tags"`
	Bio   string   `json:"bio" msgpack:"bio"`
	Score float64  `json:"score" msgpack:"score"`
}

var words = strings.Fields(`the a of and to in is for on with as by at from
	order ship pay user admin beta region price stock item cart green blue
	red small large fast slow new old open closed north south east west
	alpha delta gamma omega river stone cloud light dark paper glass metal
	wood iron gold silver lake hill field road city town`)

// Docs returns records whose msgpack encoding is at least size bytes.
func Docs(size int) []Doc {
	r := rand.New(rand.NewPCG(1, 2))
	word := func() string { return words[r.IntN(len(words))] }
	var out []Doc
	n := 0
	for n < size {
		d := Doc{
			ID:    r.IntN(1_000_000),
			Name:  word() + " " + word(),
			Email: fmt.Sprintf("%s.%s%d@example.com", word(), word(), r.IntN(100)),
			Tags:  []string{word(), word(), word()}[:1+r.IntN(3)],
			Score: r.Float64() * 100,
		}
		bio := make([]string, 5+r.IntN(15))
		for j := range bio {
			bio[j] = word()
		}
		d.Bio = strings.Join(bio, " ")
		out = append(out, d)
		b, err := msgpack.Marshal(d)
		if err != nil {
			panic(err) // a Doc always encodes
		}
		n += len(b)
	}
	return out
}
