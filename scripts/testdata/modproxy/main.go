// Command modproxy writes a Go module proxy, in the layout GOPROXY=file://
// reads, that serves each module directory it is given at one version: the
// consumer check (scripts/consumer-check.sh) builds it from the working tree
// to resolve the repository's modules as a user outside it would.
//
//	go run . -version v0.1.0 -out /tmp/proxy ../../.. ../../../stampedeprom …
//
// For each directory it reads the module path from go.mod and writes
// <module>/@v/list, <version>.info, <version>.mod (the directory's go.mod
// as it is: a consumer ignores its replace directives) and <version>.zip
// (golang.org/x/mod/zip.CreateFromDir, which leaves out nested modules,
// VCS directories and symbolic links, and checks the zip's limits).
//
// It lives under testdata so that the library's module neither builds it
// nor requires golang.org/x/mod; it is a module of its own.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

func main() {
	version := flag.String("version", "v0.1.0", "the version every module is served at")
	out := flag.String("out", "", "the proxy directory to write (required)")
	flag.Parse()
	if *out == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: modproxy -version vX.Y.Z -out DIR MODULE_DIR...")
		os.Exit(2)
	}
	for _, dir := range flag.Args() {
		path, err := write(*out, dir, *version)
		if err != nil {
			fmt.Fprintln(os.Stderr, "modproxy:", err)
			os.Exit(1)
		}
		fmt.Printf("modproxy: %s@%s from %s\n", path, *version, dir)
	}
}

// write adds the module in dir to the proxy at out, at version, and returns
// its module path.
func write(out, dir, version string) (string, error) {
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return "", err
	}
	path := modfile.ModulePath(gomod)
	if path == "" {
		return "", fmt.Errorf("%s: go.mod has no module line", dir)
	}
	m := module.Version{Path: path, Version: version}
	if err := module.Check(m.Path, m.Version); err != nil {
		return "", err
	}
	escaped, err := module.EscapePath(path)
	if err != nil {
		return "", err
	}
	vdir := filepath.Join(out, filepath.FromSlash(escaped), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return "", err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, time.Now().UTC().Truncate(time.Second)})
	if err != nil {
		return "", err
	}
	for name, data := range map[string][]byte{
		"list":            []byte(version + "\n"),
		version + ".info": info,
		version + ".mod":  gomod,
	} {
		if err := os.WriteFile(filepath.Join(vdir, name), data, 0o644); err != nil {
			return "", err
		}
	}
	return path, writeZip(filepath.Join(vdir, version+".zip"), m, dir)
}

// writeZip writes the module zip of m, made from dir, to file.
func writeZip(file string, m module.Version, dir string) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if err := zip.CreateFromDir(f, m, dir); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
