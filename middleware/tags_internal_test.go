package middleware

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
)

func TestParseTags(t *testing.T) {
	names := []string{"Surrogate-Key", "Cache-Tag", "X-Tags"}
	tests := []struct {
		name   string
		h      http.Header
		want   []string
		reason string
	}{
		{"none", http.Header{}, nil, ""},
		{"spaces", http.Header{"Surrogate-Key": {" a  b\tc "}}, []string{"a", "b", "c"}, ""},
		{"commas", http.Header{"Cache-Tag": {"a, b ,c,,"}}, []string{"a", "b", "c"}, ""},
		{"lines and duplicates", http.Header{"Surrogate-Key": {"a b", "b c"}, "Cache-Tag": {"c,d"}}, []string{"a", "b", "c", "d"}, ""},
		{"either in another field", http.Header{"X-Tags": {"a,b c"}}, []string{"a", "b", "c"}, ""},
		{"a space in a Cache-Tag tag", http.Header{"Cache-Tag": {"big sale"}}, nil, `tags: tag "big sale" holds a space, a comma or a control character`},
		{"a comma in a Surrogate-Key tag", http.Header{"Surrogate-Key": {"a,b"}}, nil, `tags: tag "a,b" holds a space, a comma or a control character`},
		{"a control character", http.Header{"Surrogate-Key": {"a\x01b"}}, nil, `tags: tag "a\x01b" holds a space, a comma or a control character`},
		{"too long", http.Header{"Surrogate-Key": {strings.Repeat("x", 1025)}}, nil, "tags: a tag of 1025 bytes, more than 1024"},
		{"longest", http.Header{"Surrogate-Key": {strings.Repeat("x", 1024)}}, []string{strings.Repeat("x", 1024)}, ""},
		{"not UTF-8 is bytes", http.Header{"Surrogate-Key": {"caf\xe9"}}, []string{"caf\xe9"}, ""},
	}
	for _, tt := range tests {
		got, reason := parseTags(tt.h, names)
		if !slices.Equal(got, tt.want) || reason != tt.reason {
			t.Errorf("%s: %q, %q; want %q, %q", tt.name, got, reason, tt.want, tt.reason)
		}
	}
	var many []string
	for i := range 129 {
		many = append(many, "t"+strings.Repeat("i", i))
	}
	if got, reason := parseTags(http.Header{"Surrogate-Key": {strings.Join(many[:128], " ")}}, names); len(got) != 128 || reason != "" {
		t.Errorf("128 tags: %d, %q", len(got), reason)
	}
	if got, reason := parseTags(http.Header{"Surrogate-Key": {strings.Join(many, " ")}}, names); got != nil || reason != "tags: more than 128" {
		t.Errorf("129 tags: %d, %q", len(got), reason)
	}
}

// FuzzParseTags: any field values parse without panicking, to tags that
// PurgeTag accepts, each once, at most 128, that parse again to the same
// list when written back as one Surrogate-Key or one Cache-Tag line; or
// to a reason and no tags.
func FuzzParseTags(f *testing.F) {
	for _, seed := range [][2]string{
		{"a b", "c,d"}, {"  ", ",,"}, {"a\tb", "a, b"}, {"x\x00y", ""}, {"caf\xe9", "big sale"}, {"a,b", ""},
	} {
		f.Add(seed[0], seed[1])
	}
	names := []string{"Surrogate-Key", "Cache-Tag"}
	f.Fuzz(func(t *testing.T, sk, ct string) {
		h := http.Header{"Surrogate-Key": {sk}, "Cache-Tag": {ct}}
		tags, reason := parseTags(h, names)
		if reason != "" {
			if tags != nil {
				t.Fatalf("%q, %q: reason %q with tags %q", sk, ct, reason, tags)
			}
			return
		}
		if len(tags) > maxTags {
			t.Fatalf("%d tags", len(tags))
		}
		for i, tag := range tags {
			if why := validTag(tag); why != "" {
				t.Fatalf("%q, %q: tag %q: %s", sk, ct, tag, why)
			}
			if slices.Contains(tags[:i], tag) {
				t.Fatalf("%q, %q: %q twice", sk, ct, tag)
			}
		}
		for _, back := range []http.Header{
			{"Surrogate-Key": {strings.Join(tags, " ")}},
			{"Cache-Tag": {strings.Join(tags, ", ")}},
		} {
			again, reason := parseTags(back, names)
			if reason != "" || !slices.Equal(again, tags) {
				t.Fatalf("%q written back as %q parses to %q, %q", tags, back, again, reason)
			}
		}
	})
}

// TestBaseKey_funcNotATag: a Keys.Func key is used as it is, but one that
// begins as the records of tags do bypasses: no page can be stored over
// a tag's record, nor a record read as a page.
func TestBaseKey_funcNotATag(t *testing.T) {
	m := &Middleware{o: Options{Keys: KeyPolicy{Func: func(r *http.Request) (string, bool) {
		return r.URL.Query().Get("k"), true
	}}}}
	for _, tt := range []struct {
		k    string
		want string
		ok   bool
	}{
		{"page-1", "page-1", true},
		{"tag", "tag", true},
		{"tag\nproduct-1", "", false},
		{tagKey("x"), "", false},
	} {
		r, _ := http.NewRequest(http.MethodGet, "http://example.com/?k="+url.QueryEscape(tt.k), nil)
		if key, ok := m.baseKey(r); key != tt.want || ok != tt.ok {
			t.Errorf("Func key %q: baseKey %q, %v; want %q, %v", tt.k, key, ok, tt.want, tt.ok)
		}
	}
}
