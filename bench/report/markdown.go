package report

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// WriteMarkdown writes dir/report.md: how the run was made, every table,
// the plots and the notes.
func WriteMarkdown(dir string, r *Results) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# stampede bench\n\n")
	fmt.Fprintf(&b, "- date: %s\n", r.Started.UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(&b, "- machine: %s/%s, %d CPUs, %s", r.Machine.GOOS, r.Machine.GOARCH, r.Machine.CPUs, r.Machine.Go)
	if r.Machine.CPU != "" {
		fmt.Fprintf(&b, ", %s", r.Machine.CPU)
	}
	if r.Machine.Load != "" {
		fmt.Fprintf(&b, "; load average %s", r.Machine.Load)
	}
	fmt.Fprintf(&b, "\n- server: %s (%s) at %s\n", r.Server.Capabilities, r.Server.Kind, r.Server.Addr)
	fmt.Fprintf(&b, "- command: `%s`\n", r.Command)
	fmt.Fprintf(&b, "- run time: %.1f s\n", r.ElapsedS)
	fmt.Fprintf(&b, "\nEach process is a separate OS process (the bench binary started again as a worker), "+
		"as pods are; all of them share the one server.\n")

	plots := map[string]string{
		"Hot-key expiry":                         "hot-latency.png",
		"Cold stampede":                          "loader-calls.png",
		"Scaling with distinct keys":             "scaling.png",
		"Near cache: coherence across processes": "coherence.png",
	}
	for _, t := range tables(r) {
		fmt.Fprintf(&b, "\n## %s\n\n%s\n\n", t.title, t.about)
		fmt.Fprintf(&b, "| %s |\n|%s\n", strings.Join(escape(t.header), " | "), strings.Repeat(" --- |", len(t.header)))
		for _, row := range t.rows {
			fmt.Fprintf(&b, "| %s |\n", strings.Join(escape(row), " | "))
		}
		if p, ok := plots[t.title]; ok && hasPlot(r, p) {
			fmt.Fprintf(&b, "\n![%s](%s)\n", t.title, p)
		}
	}
	if hasPlot(r, "scaling.png") && len(r.ScaleKeys) == 0 {
		fmt.Fprintf(&b, "\n![Scaling](scaling.png)\n")
	}
	if len(r.Notes) > 0 {
		fmt.Fprintf(&b, "\n## Notes\n\n")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	return os.WriteFile(filepath.Join(dir, "report.md"), []byte(b.String()), 0o644)
}

func hasPlot(r *Results, name string) bool {
	for _, p := range r.Plots {
		if p == name {
			return true
		}
	}
	return false
}

func escape(cells []string) []string {
	out := make([]string, len(cells))
	for i, c := range cells {
		out[i] = strings.ReplaceAll(c, "|", `\|`)
	}
	return out
}
