package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// repo is the git repository the modules are in, and the trees of its
// commits that were extracted to load an older API.
type repo struct {
	root   string
	module string            // the path of the root module
	tmp    string            // a folder for the trees, made on first use
	trees  map[string]string // revision → its tree under tmp
}

// git runs a git command in the repository and returns its output,
// trimmed.
func (r *repo) git(args ...string) (string, error) {
	cmd := exec.Command("git", append([]string{"-C", r.root}, args...)...)
	out, err := cmd.Output()
	return strings.TrimSpace(string(out)), err
}

// loadAt loads the module in folder dir as revision rev has it.
func (r *repo) loadAt(rev, dir string) (*module, error) {
	tree, ok := r.trees[rev]
	if !ok {
		if r.tmp == "" {
			tmp, err := os.MkdirTemp("", "apicheck-")
			if err != nil {
				return nil, err
			}
			r.tmp, r.trees = tmp, map[string]string{}
		}
		tree = filepath.Join(r.tmp, fmt.Sprint(len(r.trees)))
		if err := os.Mkdir(tree, 0o755); err != nil {
			return nil, err
		}
		// The whole tree, since a nested module reaches the root through
		// its replace directive.
		archive := exec.Command("git", "-C", r.root, "archive", rev)
		extract := exec.Command("tar", "-x", "-C", tree)
		pipe, err := archive.StdoutPipe()
		if err != nil {
			return nil, err
		}
		extract.Stdin = pipe
		if err := archive.Start(); err != nil {
			return nil, err
		}
		errExtract := extract.Run()
		if err := archive.Wait(); err != nil {
			return nil, fmt.Errorf("git archive %s: %v", rev, err)
		}
		if errExtract != nil {
			return nil, fmt.Errorf("extracting %s: %v", rev, errExtract)
		}
		r.trees[rev] = tree
	}
	m, err := load(filepath.Join(tree, dir))
	if err != nil {
		return nil, fmt.Errorf("loading %s as %s has it: %v", dir, rev, err)
	}
	return m.list(r.module), nil
}

// cleanup removes the extracted trees.
func (r *repo) cleanup() {
	if r.tmp != "" {
		os.RemoveAll(r.tmp)
	}
}
