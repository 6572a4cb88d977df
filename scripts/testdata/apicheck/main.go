// Command apicheck compares the exported API of Go modules with a baseline
// kept in the repository, and writes that baseline. scripts/apicheck.sh
// runs it; docs/releasing.md says when and why.
//
//	go run . -root REPO [-w] MODULE_DIR...
//
// MODULE_DIR is a module's folder relative to REPO, the first one the
// repository's root module, whose path prefixes the packages whose hidden
// types are listed (see listing). For each it loads the
// module's packages, leaving out internal ones and those without non-test
// files (go/packages, with the environment it is given: scripts/apicheck.sh
// sets GOWORK=off), and names the module by the last element of its path
// (github.com/hotkv/stampede is "stampede"). The module's baseline is
// REPO/api/NAME.txt: one line per exported name, method, field and
// interface method, with its type (see listing).
//
// With -w it writes the baselines and nothing else. Without, it fails
// (exit 1) when a module's listing differs from its baseline, printing each
// line removed or added and apidiff's verdict on each change
// (golang.org/x/exp/apidiff.ModuleChanges), from the source of the last
// commit that changed api/ (whose API the baseline describes: CI checked
// it) to the working tree.
//
// When a release tag exists (the newest vX.Y.Z, as git sorts versions)
// and has an api/, then for each package whose lines differ between that
// tag's baseline and the working tree's, the newest section of
// REPO/CHANGELOG.md (its first "## " heading: "Unreleased", or the version
// being released, but not the tag's) must have a "###" heading that names
// the package (the last element of its path, as a word); if one is
// missing, it prints apidiff's report from the tag to the working tree and
// fails.
//
// It lives under testdata so that the library's module neither builds it
// nor requires golang.org/x/exp; it is a module of its own.
package main

import (
	"flag"
	"fmt"
	"go/types"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/exp/apidiff"
	"golang.org/x/tools/go/packages"
)

const regenerate = "scripts/apicheck.sh -w"

func main() { os.Exit(run()) }

// run returns the exit code: 0 when the check passes (or -w wrote the
// baselines), 1 when it fails, 2 on an error.
func run() int {
	root := flag.String("root", "", "the repository (required)")
	write := flag.Bool("w", false, "write the baselines instead of checking them")
	flag.Parse()
	if *root == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: apicheck -root REPO [-w] MODULE_DIR...")
		return 2
	}
	r := &repo{root: *root}
	defer r.cleanup()
	mods := make([]*module, flag.NArg())
	for i, dir := range flag.Args() {
		m, err := load(filepath.Join(*root, dir))
		if err != nil {
			return fatal(err)
		}
		if i == 0 {
			r.module = m.Path
		}
		m.list(r.module)
		m.dir = dir
		m.txt = filepath.Join("api", m.name()+".txt")
		mods[i] = m
	}
	if *write {
		if err := os.MkdirAll(filepath.Join(*root, "api"), 0o755); err != nil {
			return fatal(err)
		}
		for _, m := range mods {
			if err := writeListing(filepath.Join(*root, m.txt), m); err != nil {
				return fatal(err)
			}
			fmt.Printf("apicheck: %s: wrote %s (%d lines)\n", m.Path, m.txt, len(m.lines))
		}
		return 0
	}
	ok := checkBaselines(r, mods)
	ok = checkChangelog(r, mods) && ok
	if !ok {
		return 1
	}
	fmt.Printf("apicheck: the exported API of %d modules matches api/*.txt\n", len(mods))
	return 0
}

func fatal(err error) int {
	fmt.Fprintf(os.Stderr, "apicheck: %v\n", err)
	return 2
}

// A module is a loaded module and its listing.
type module struct {
	apidiff.Module
	dir   string   // relative to the repository
	txt   string   // its baseline, relative to the repository
	lines []string // its listing
}

func (m *module) name() string { return path.Base(m.Path) }

// load loads the public packages of the module in dir.
func load(dir string) (*module, error) {
	cfg := &packages.Config{
		Dir:  dir,
		Mode: packages.NeedName | packages.NeedFiles | packages.NeedTypes | packages.NeedModule,
		// go list -export compiles the packages; -trimpath keeps their
		// folder out of the build cache's keys, so that loading an older
		// tree (loadAt) compiles only the packages that differ.
		Env: append(os.Environ(), "GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -trimpath")),
	}
	pkgs, err := packages.Load(cfg, "./...")
	if err != nil {
		return nil, err
	}
	m := &module{}
	var errs []string
	for _, p := range pkgs {
		if p.Module != nil && p.Module.Main && m.Path == "" {
			m.Path = p.Module.Path
		}
		if len(p.GoFiles) == 0 || internal(p.PkgPath) {
			continue
		}
		for _, e := range p.Errors {
			errs = append(errs, e.Error())
		}
		m.Packages = append(m.Packages, p.Types)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s: %s", dir, strings.Join(errs, "\n"))
	}
	if m.Path == "" || len(m.Packages) == 0 {
		return nil, fmt.Errorf("%s: no public package in a module", dir)
	}
	slices.SortFunc(m.Packages, func(a, b *types.Package) int { return strings.Compare(a.Path(), b.Path()) })
	return m, nil
}

// list sets m.lines to the listing of m's packages; repo is the path
// prefix of the packages whose hidden types are listed.
func (m *module) list(repo string) *module {
	m.lines = nil
	for _, p := range m.Packages {
		m.lines = append(m.lines, listing(p, repo)...)
	}
	slices.Sort(m.lines)
	return m
}

func internal(pkgPath string) bool {
	return slices.Contains(strings.Split(pkgPath, "/"), "internal")
}

func writeListing(file string, m *module) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# The exported API of %s, one line per name, written by\n", m.Path)
	fmt.Fprintf(&b, "# %s. A change here is a change users see: review it, and\n", regenerate)
	fmt.Fprintf(&b, "# describe it in CHANGELOG.md (docs/releasing.md#the-api-check).\n")
	for _, l := range m.lines {
		b.WriteString(l + "\n")
	}
	return os.WriteFile(file, []byte(b.String()), 0o644)
}

// parseListing returns the lines of a listing, without comments.
func parseListing(b []byte) []string {
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	return lines
}

// checkBaselines compares each module with its baseline and reports
// whether all agree.
func checkBaselines(r *repo, mods []*module) bool {
	ok := true
	for _, m := range mods {
		b, err := os.ReadFile(filepath.Join(r.root, m.txt))
		if err != nil {
			fmt.Printf("apicheck: %s: no baseline (%v); write it with %s\n", m.Path, err, regenerate)
			ok = false
			continue
		}
		removed, added := diff(parseListing(b), m.lines)
		if len(removed)+len(added) == 0 {
			continue
		}
		ok = false
		fmt.Printf("apicheck: %s: the exported API differs from %s:\n", m.Path, m.txt)
		printDiff(removed, added)
		// apidiff compares types, not lines: it needs the source the
		// baseline was written from.
		rev, err := r.git("log", "-1", "--format=%H", "--", "api")
		if err != nil || rev == "" {
			fmt.Printf("  (no commit has api/ yet, so apidiff has nothing to compare with)\n")
			continue
		}
		rev = rev[:12]
		base, err := r.loadAt(rev, m.dir)
		if err != nil {
			fmt.Printf("  (apidiff: %v)\n", err)
			continue
		}
		fmt.Printf("  apidiff, from the source of %s (the last commit that changed api/) to the working tree:\n", rev)
		if removed, added := diff(parseListing(b), base.lines); len(removed)+len(added) > 0 {
			fmt.Printf("  (%s was not checked: its own API differs from its %s by %d lines, so apidiff's\n"+
				"  verdicts below are on the changes since %s, not since the baseline)\n", rev, m.txt, len(removed)+len(added), rev)
		}
		printReport(apidiff.ModuleChanges(&base.Module, &m.Module))
	}
	if !ok {
		fmt.Printf("apicheck: if the change is meant, run %s, review the diff of api/*.txt and\n"+
			"  say what changed in CHANGELOG.md (docs/releasing.md#the-api-check).\n", regenerate)
	}
	return ok
}

// checkChangelog reports whether the newest section of CHANGELOG.md has a
// "###" heading naming each package whose baseline changed since the last
// release tag. It holds when there is no such tag, or the tag has no api/.
func checkChangelog(r *repo, mods []*module) bool {
	tags, err := r.git("tag", "-l", "v[0-9]*", "--sort=-v:refname")
	if err != nil || tags == "" {
		return true
	}
	tag, _, _ := strings.Cut(tags, "\n")
	if _, err := r.git("rev-parse", "--verify", "-q", tag+":api"); err != nil {
		fmt.Printf("apicheck: %s has no api/; CHANGELOG.md is not checked against it\n", tag)
		return true
	}
	changed := map[*module][]string{} // module → its packages changed since tag
	var missing []string
	section, found := unreleased(filepath.Join(r.root, "CHANGELOG.md"), tag)
	for _, m := range mods {
		then, _ := r.git("show", tag+":"+filepath.ToSlash(m.txt)) // none: a module new since tag
		now, err := os.ReadFile(filepath.Join(r.root, m.txt))
		if err != nil {
			continue // checkBaselines said so
		}
		removed, added := diff(parseListing([]byte(then)), parseListing(now))
		for _, l := range append(removed, added...) {
			p, _, _ := strings.Cut(strings.TrimPrefix(l, "pkg "), ",")
			if !slices.Contains(changed[m], p) {
				changed[m] = append(changed[m], p)
			}
		}
		for _, p := range changed[m] {
			if name := path.Base(p); !section[name] && !slices.Contains(missing, name) {
				missing = append(missing, name)
			}
		}
	}
	if len(missing) == 0 {
		return true
	}
	slices.Sort(missing)
	if !found {
		fmt.Printf("apicheck: the exported API of %s changed since %s, and CHANGELOG.md has no section\n"+
			"  above %s's (\"## Unreleased\") with a \"###\" heading naming each: say there what changed and how to upgrade.\n",
			strings.Join(missing, ", "), tag, tag)
	} else {
		fmt.Printf("apicheck: the exported API of %s changed since %s, and the newest section of CHANGELOG.md\n"+
			"  (\"## Unreleased\") has no \"###\" heading naming %s: say there what changed and how to upgrade.\n",
			strings.Join(missing, ", "), tag, strings.Join(missing, ", "))
	}
	for _, m := range mods {
		if len(changed[m]) == 0 {
			continue
		}
		old, err := r.loadAt(tag, m.dir)
		if err != nil {
			fmt.Printf("  %s: (apidiff: %v)\n", m.Path, err)
			continue
		}
		fmt.Printf("  %s: apidiff, %s → working tree:\n", m.Path, tag)
		printReport(apidiff.ModuleChanges(&old.Module, &m.Module))
	}
	return false
}

// unreleased returns the words of the "###" headings in the newest
// section of a changelog (from its first "## " heading to the next), and
// whether there is one that is not tag's: "## Unreleased …" before a
// release, "## vX.Y.Z (date)" in the commit that releases vX.Y.Z.
func unreleased(file, tag string) (words map[string]bool, found bool) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, false
	}
	words = map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		if h, ok := strings.CutPrefix(l, "## "); ok {
			if found || h == tag || strings.HasPrefix(h, tag+" ") {
				break
			}
			found = true
			continue
		}
		if h, ok := strings.CutPrefix(l, "### "); ok && found {
			for _, w := range strings.FieldsFunc(h, func(r rune) bool {
				return !(r == '_' || '0' <= r && r <= '9' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z')
			}) {
				words[w] = true
			}
		}
	}
	return words, found
}

// diff returns the lines of want missing from got, and those of got
// missing from want, each sorted.
func diff(want, got []string) (removed, added []string) {
	w, g := map[string]bool{}, map[string]bool{}
	for _, l := range want {
		w[l] = true
	}
	for _, l := range got {
		g[l] = true
		if !w[l] {
			added = append(added, l)
		}
	}
	for _, l := range want {
		if !g[l] {
			removed = append(removed, l)
		}
	}
	slices.Sort(removed)
	slices.Sort(added)
	return removed, added
}

func printDiff(removed, added []string) {
	for _, l := range removed {
		fmt.Printf("  - %s\n", l)
	}
	for _, l := range added {
		fmt.Printf("  + %s\n", l)
	}
}

func printReport(r apidiff.Report) {
	if len(r.Changes) == 0 {
		fmt.Println("    (no change apidiff sees)")
	}
	for _, c := range r.Changes {
		if !c.Compatible {
			fmt.Printf("    incompatible: %s\n", c.Message)
		}
	}
	for _, c := range r.Changes {
		if c.Compatible {
			fmt.Printf("    compatible:   %s\n", c.Message)
		}
	}
}
