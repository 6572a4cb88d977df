// Package stampede_test checks the documentation: every Go snippet in
// README.md, ARCHITECTURE.md, CHANGELOG.md and docs/*.md is the body of an
// Example function that go test compiles, every relative link and godoc
// link in them points at something that exists, and no heading of theirs
// (CHANGELOG.md's aside) has more than maxSectionLines lines under it.
//
// A snippet opens with the line
//
//	// example: <dir>.<ExampleName>
//
// where dir is the package's folder from the repository root (lock,
// cache, stampedeprom, ...), and the rest of the block must equal that
// function's body, unindented by one tab. A block that is not meant to
// compile follows an HTML comment "<!-- fragment: why -->" on the line
// before its fence.
package stampede_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// docFiles are the Markdown files whose snippets and links are checked.
func docFiles(tb testing.TB) []string {
	tb.Helper()
	files := []string{"README.md", "ARCHITECTURE.md", "CHANGELOG.md"}
	pages, err := filepath.Glob("docs/*.md")
	if err != nil {
		tb.Fatal(err)
	}
	if len(pages) == 0 {
		tb.Fatal("no docs/*.md: run the test from the repository root")
	}
	return append(files, pages...)
}

// snippet is one fenced Go block of a Markdown file.
type snippet struct {
	file     string
	line     int    // of the opening fence, 1-based
	marker   string // "dir.ExampleName", or "" when there is none
	fragment string // the reason given by <!-- fragment: ... -->
	body     []string
}

var (
	markerRe   = regexp.MustCompile(`^// example: ([A-Za-z0-9_./-]+)\.(Example[A-Za-z0-9_]*)$`)
	fragmentRe = regexp.MustCompile(`^<!-- fragment: (.+) -->$`)
)

func readSnippets(tb testing.TB, file string) []snippet {
	tb.Helper()
	lines := readLines(tb, file)
	var out []snippet
	for i := 0; i < len(lines); i++ {
		fence := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(fence, "```") {
			continue
		}
		lang := strings.TrimPrefix(fence, "```")
		start := i
		i++
		for i < len(lines) && strings.TrimSpace(lines[i]) != "```" {
			i++
		}
		if lang != "go" {
			continue
		}
		s := snippet{file: file, line: start + 1, body: lines[start+1 : min(i, len(lines))]}
		if start > 0 {
			if m := fragmentRe.FindStringSubmatch(strings.TrimSpace(lines[start-1])); m != nil {
				s.fragment = m[1]
			}
		}
		if len(s.body) > 0 {
			if m := markerRe.FindStringSubmatch(strings.TrimSpace(s.body[0])); m != nil {
				s.marker = m[1] + "." + m[2]
				s.body = s.body[1:]
			}
		}
		out = append(out, s)
	}
	return out
}

func readLines(tb testing.TB, file string) []string {
	tb.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		tb.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// exampleBody returns the body of the Example function name declared in a
// _test.go file of dir, unindented by one tab, and where it is.
func exampleBody(dir, name string) (body []string, where string, err error) {
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil || len(files) == 0 {
		return nil, "", fmt.Errorf("no test files in %s", dir)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			return nil, "", err
		}
		af, err := parser.ParseFile(fset, f, src, parser.ParseComments)
		if err != nil {
			return nil, "", err
		}
		for _, d := range af.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv != nil || fd.Name.Name != name || fd.Body == nil {
				continue
			}
			open := fset.Position(fd.Body.Lbrace).Offset
			end := fset.Position(fd.Body.Rbrace).Offset
			text := strings.Trim(string(src[open+1:end]), "\n")
			for _, l := range strings.Split(text, "\n") {
				body = append(body, strings.TrimPrefix(l, "\t"))
			}
			return body, fmt.Sprintf("%s:%d", f, fset.Position(fd.Pos()).Line), nil
		}
	}
	return nil, "", fmt.Errorf("no func %s in %s/*_test.go", name, dir)
}

// TestDocs_snippets fails for a Go block in the docs that is neither the
// body of a named Example function (which go test compiles, in the module
// that holds it) nor marked as a fragment.
func TestDocs_snippets(t *testing.T) {
	n, fragments := 0, 0
	for _, file := range docFiles(t) {
		if _, err := os.Stat(file); err != nil {
			t.Errorf("%s: %v", file, err)
			continue
		}
		for _, s := range readSnippets(t, file) {
			n++
			switch {
			case s.marker == "" && s.fragment != "":
				fragments++
				continue
			case s.marker == "":
				t.Errorf("%s:%d: a go block without a first line \"// example: <dir>.Example<Name>\" nor a \"<!-- fragment: why -->\" before it", s.file, s.line)
				continue
			}
			dot := strings.LastIndex(s.marker, ".")
			dir, name := s.marker[:dot], s.marker[dot+1:]
			want, where, err := exampleBody(filepath.FromSlash(dir), name)
			if err != nil {
				t.Errorf("%s:%d: %v", s.file, s.line, err)
				continue
			}
			if d := firstDiff(s.body, want); d >= 0 {
				t.Errorf("%s:%d: the snippet differs from %s (%s) at its line %d:\n doc:  %q\n code: %q",
					s.file, s.line+2+d, name, where, d+1, at(s.body, d), at(want, d))
			}
		}
	}
	if n == 0 {
		t.Fatal("no go blocks found")
	}
	if fragments > 3 {
		t.Errorf("%d go blocks are fragments; make them Examples", fragments)
	}
	t.Logf("%d go blocks, %d of them fragments", n, fragments)
}

func firstDiff(a, b []string) int {
	for i := range max(len(a), len(b)) {
		if i >= len(a) || i >= len(b) || strings.TrimRight(a[i], " \t") != strings.TrimRight(b[i], " \t") {
			return i
		}
	}
	return -1
}

func at(s []string, i int) string {
	if i < len(s) {
		return s[i]
	}
	return "(end)"
}

var (
	linkRe   = regexp.MustCompile(`\]\(([^()\s]+)\)`)
	codeRe   = regexp.MustCompile("`[^`]*`")
	godocURL = "https://pkg.go.dev/github.com/hotkv/stampede"
)

// TestDocs_links fails for a relative link to a file or heading that does
// not exist, and for a pkg.go.dev link into this repository naming a
// package or identifier that does not exist.
func TestDocs_links(t *testing.T) {
	anchors := map[string]map[string]bool{}
	anchorsOf := func(file string) map[string]bool {
		if a, ok := anchors[file]; ok {
			return a
		}
		a := headingAnchors(t, file)
		anchors[file] = a
		return a
	}
	n := 0
	for _, file := range docFiles(t) {
		if _, err := os.Stat(file); err != nil {
			continue // TestDocs_snippets reports it
		}
		fence := false
		for i, line := range readLines(t, file) {
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				fence = !fence
			}
			if fence {
				continue
			}
			for _, m := range linkRe.FindAllStringSubmatch(codeRe.ReplaceAllString(line, ""), -1) {
				n++
				if err := checkLink(file, m[1], anchorsOf); err != nil {
					t.Errorf("%s:%d: link %s: %v", file, i+1, m[1], err)
				}
			}
		}
	}
	t.Logf("%d links", n)
}

func checkLink(file, target string, anchorsOf func(string) map[string]bool) error {
	switch {
	case strings.HasPrefix(target, godocURL):
		return checkGodoc(strings.TrimPrefix(target, godocURL))
	case strings.Contains(target, "://"), strings.HasPrefix(target, "mailto:"):
		return nil // not checked: no network in tests
	}
	path, frag, _ := strings.Cut(target, "#")
	dest := file
	if path != "" {
		dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
		if _, err := os.Stat(dest); err != nil {
			return fmt.Errorf("no such file or folder %s", dest)
		}
	}
	if frag == "" {
		return nil
	}
	if !strings.HasSuffix(dest, ".md") {
		return fmt.Errorf("an anchor into %s, which is not Markdown", dest)
	}
	if !anchorsOf(dest)[frag] {
		return fmt.Errorf("no heading with anchor #%s in %s", frag, dest)
	}
	return nil
}

// headingAnchors returns the anchors GitHub gives the headings of file:
// lower case, punctuation dropped, spaces as hyphens, repeats numbered.
func headingAnchors(tb testing.TB, file string) map[string]bool {
	tb.Helper()
	a := map[string]bool{}
	seen := map[string]int{}
	fence := false
	for _, line := range readLines(tb, file) {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fence = !fence
		}
		if fence || !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		slug := b.String()
		if k := seen[slug]; k > 0 {
			a[fmt.Sprintf("%s-%d", slug, k)] = true
		} else {
			a[slug] = true
		}
		seen[slug]++
	}
	return a
}

// maxSectionLines is the most lines a heading may have under it, so that
// a reader who lands on a heading finds what it names within a screen or
// two: the lines from the one after the heading to the one before the
// next heading of any level, fenced code included (a title's run to its
// first subheading).
const maxSectionLines = 80

// sectionExempt are the docFiles whose sections are not bounded:
// CHANGELOG.md is a history, headed by release and package, whose
// sections grow with every change by design.
var sectionExempt = map[string]bool{"CHANGELOG.md": true}

// TestDocs_sections fails for a heading with more than maxSectionLines
// lines under it, naming the file, the heading, its line and the count.
// Break such a section up with headings a reader can land on.
func TestDocs_sections(t *testing.T) {
	n, longest, where := 0, 0, ""
	for _, file := range docFiles(t) {
		if sectionExempt[file] {
			continue
		}
		if _, err := os.Stat(file); err != nil {
			continue // TestDocs_snippets reports it
		}
		for _, s := range sections(t, file) {
			n++
			if s.lines > longest {
				longest, where = s.lines, fmt.Sprintf("%s:%d %q", file, s.line, s.heading)
			}
			if s.lines > maxSectionLines {
				t.Errorf("%s:%d: heading %q has %d lines under it, more than %d: break it up with headings a reader can land on",
					file, s.line, s.heading, s.lines, maxSectionLines)
			}
		}
	}
	if n == 0 {
		t.Fatal("no headings found")
	}
	t.Logf("%d headings; the longest section, %d lines, is %s", n, longest, where)
}

// TestDocs_sectionsCounted checks how sections counts, on a page made up
// for it: a fenced "#" line is no heading, and a title's lines run to its
// first subheading.
func TestDocs_sectionsCounted(t *testing.T) {
	page := "intro before any heading\n" +
		"# Title\n\ntext\n\n" +
		"## One\n\n```sh\n# a comment, not a heading\n```\n\n" +
		"### One.one\n#hashtag, not a heading\n" +
		"## Two\n"
	file := filepath.Join(t.TempDir(), "page.md")
	if err := os.WriteFile(file, []byte(page), 0o600); err != nil {
		t.Fatal(err)
	}
	want := []section{
		{heading: beforeFirst, line: 1, lines: 1},
		{heading: "# Title", line: 2, lines: 3},
		{heading: "## One", line: 6, lines: 5},
		{heading: "### One.one", line: 12, lines: 1},
		{heading: "## Two", line: 14, lines: 0},
	}
	got := sections(t, file)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("sections:\n got  %v\n want %v", got, want)
	}
}

// section is a heading of a Markdown file and the lines under it.
type section struct {
	heading string // the heading's line, "# Title"
	line    int    // its line, 1-based
	lines   int    // the lines under it, to the next heading of any level
}

var headingRe = regexp.MustCompile(`^#{1,6}(\s|$)`)

// beforeFirst names the lines before a file's first heading.
const beforeFirst = "(before the first heading)"

// sections returns the headings of file outside fenced code, each with the
// lines under it. Lines before the first heading, if any, are a section
// of their own, named beforeFirst.
func sections(tb testing.TB, file string) []section {
	tb.Helper()
	lines := readLines(tb, file)
	var out []section
	cur, from := section{heading: beforeFirst, line: 1}, 0 // from: cur's first line under it
	fence := false
	for i, line := range lines {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fence = !fence
		}
		if fence || !headingRe.MatchString(line) {
			continue
		}
		cur.lines = i - from
		if cur.heading != beforeFirst || cur.lines > 0 {
			out = append(out, cur)
		}
		cur, from = section{heading: strings.TrimSpace(line), line: i + 1}, i+1
	}
	cur.lines = len(lines) - from
	return append(out, cur)
}

// checkGodoc checks "/pkg#Name" or "/pkg#Type.Member" against the
// package's non-test sources.
func checkGodoc(rest string) error {
	pkg, sym, _ := strings.Cut(rest, "#")
	dir := "." + filepath.FromSlash(pkg)
	if pkg == "" {
		dir = "."
	}
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no Go package in %s", dir)
	}
	if sym == "" {
		return nil
	}
	names := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, d := range af.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					names[d.Name.Name] = true
				} else if len(d.Recv.List) > 0 {
					names[recvName(d.Recv.List[0].Type)+"."+d.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.ValueSpec:
						for _, n := range s.Names {
							names[n.Name] = true
						}
					case *ast.TypeSpec:
						names[s.Name.Name] = true
						if st, ok := s.Type.(*ast.StructType); ok {
							for _, fl := range st.Fields.List {
								for _, n := range fl.Names {
									names[s.Name.Name+"."+n.Name] = true
								}
							}
						}
						if it, ok := s.Type.(*ast.InterfaceType); ok {
							for _, m := range it.Methods.List {
								for _, n := range m.Names {
									names[s.Name.Name+"."+n.Name] = true
								}
							}
						}
					}
				}
			}
		}
	}
	if !names[sym] || !ast.IsExported(strings.Split(sym, ".")[0]) {
		return fmt.Errorf("package %s declares no exported %s", dir, sym)
	}
	return nil
}

func recvName(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}
