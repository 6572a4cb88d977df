package report

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sample returns results as a full run fills them, with made-up numbers.
func sample() *Results {
	lat := Latency{N: 100, P50: 1, P99: 2, P999: 3, Max: 4}
	r := &Results{Started: time.Unix(1_800_000_000, 0), ElapsedS: 60, Command: "go run ./bench",
		Machine: Machine{GOOS: "linux", GOARCH: "amd64", CPUs: 2, Go: "go1.26"},
		Server:  Server{Kind: "external", Addr: "127.0.0.1:6379", Capabilities: "redis 8.6.3: release=DELEX IFEQ"},
		Config:  Config{Procs: 4, Goroutines: 32, LoadMs: 100, Rate: 400, DurationS: 5, TTLms: 1000, ScaleLoadMs: 20}}
	for i, a := range []string{"stampede", "naive", "singleflight", "lock-poll"} {
		r.Cold = append(r.Cold, Cold{Approach: a, Procs: 4, Goroutines: 32, Requests: 128, LoaderCalls: int64(1 + 40*i), Latency: lat})
		r.Hot = append(r.Hot, Hot{Approach: a, Procs: 4, Rate: 400, Requests: 2000, Loads: 4 * (i + 1), Expiries: 4,
			LoadsPerExpiry: float64(i + 1), MaxLoadsPerExpiry: i + 1, Overall: lat, AfterExpiry: lat, WindowMs: 200})
		r.HotSeries = append(r.HotSeries, HotSeries{Approach: a, At: []float64{0.1, 1.05, 2}, LatMs: []float64{0.5, 100, 0.7},
			Loads: []float64{1.0}, Expiries: []float64{1.0}})
		for _, p := range []int{1, 2, 4, 8} {
			r.ScaleProcs = append(r.ScaleProcs, Scale{Axis: "procs", X: p, Approach: a, Procs: p, Keys: 1, Requests: 32 * p, LoaderCalls: int64(p), Latency: lat})
		}
		for _, k := range []int{1, 100, 10000} {
			r.ScaleKeys = append(r.ScaleKeys, Scale{Axis: "keys", X: k, Approach: a, Procs: 4, Keys: k, Requests: 4 * k, LoaderCalls: int64(k), Latency: lat})
		}
	}
	r.Hit = []Hit{{Mode: "raw GET + msgpack decode", Procs: 4, Goroutines: 8, Ops: 1000, PerSec: 700, Latency: lat}}
	r.Lock = []Lock{{Strategy: "DELEX IFEQ", Goroutines: 32, Cycles: 100, PerSec: 100, Latency: lat}, {Strategy: "DELIFEQ", Skipped: "the server has no DELIFEQ"}}
	r.Large = []Large{{Size: 1 << 20, Method: "DELEX IFDEQ (XXH3 digest)", Iterations: 3, BytesSent: 61, Latency: lat},
		{Size: 1 << 10, Method: "DELEX IFEQ (full value)", Skipped: "the server has no DELEX IFEQ"}}
	r.Notes = []string{"lock: DELIFEQ skipped: the server has no DELIFEQ."}
	r.Hot = append(r.Hot, Hot{Approach: "stampede-near", Procs: 4, Rate: 400, Requests: 2000, Loads: 4, Expiries: 4,
		LoadsPerExpiry: 1, MaxLoadsPerExpiry: 1, Overall: lat, AfterExpiry: lat, WindowMs: 200, NearHits: 1900})
	r.NearHit = []NearHit{{Mode: "raw", Label: "raw GET + msgpack decode", Goroutines: 32, ValueBytes: 256, Ops: 1000, PerSec: 1000, VsRaw: 1, Latency: lat},
		{Mode: "stampede-near", Label: "stampede GetOrLoad + near cache", Goroutines: 32, ValueBytes: 256, Ops: 50000, PerSec: 50000, VsRaw: 50, NearHits: 49990}}
	d := Dist{N: 170, P50: 0.3, P90: 0.5, P99: 1.2, Max: 3}
	r.Coherence = &Coherence{ReadEveryUs: 1, Samples: map[string][]float64{"Set": {0.1, 0.2, 3}, "Delete": {0.05, 0}}, Reads: 1e6, NearHits: 999e3, Rows: []CoherenceRow{{Write: "Set", NearBefore: 170, Early: 2, Latency: d},
		{Write: "all", NearBefore: 510, Early: 2, Latency: Dist{N: 510, P50: 0.3, P90: 0.5, P99: 1.2, Max: 3}, Dropped: d}}}
	r.CoherencePaced = &Coherence{Samples: map[string][]float64{"Set": {1.1, 1.2}}, Reads: 2000, NearHits: 1900, PaceUs: 50, ReadEveryUs: 1100,
		Rows: []CoherenceRow{{Write: "all", NearBefore: 510, Latency: Dist{N: 510, P50: 1.1, P90: 1.2, P99: 1.3, Max: 2}, Dropped: d}}}
	r.NearMemory = &NearMemory{ValueBytes: 256, Entries: 100000, Present: 100000, HeapFilled: 60 << 20, HeapDecoded: 90 << 20,
		FloodKeys: 1000000, FloodMax: 100000, FloodPeak: 200 << 20, FloodAfter: 55 << 20, FloodPresent: 5000, FloodSeconds: 20}
	return r
}

func TestWrite_all(t *testing.T) {
	dir := t.TempDir()
	r := sample()
	if err := WritePlots(dir, r); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(r.Plots, ","); got != "hot-latency.png,loader-calls.png,scaling.png,coherence.png" {
		t.Errorf("plots %s", got)
	}
	if err := WriteJSON(dir, r); err != nil {
		t.Fatal(err)
	}
	if err := WriteMarkdown(dir, r); err != nil {
		t.Fatal(err)
	}
	back, err := ReadJSON(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Cold) != 4 || back.Cold[1].LoaderCalls != 41 || len(back.HotSeries) != 0 {
		t.Errorf("results.json round trip: %+v", back.Cold)
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| stampede GetOrLoad | 1 |", "![Scaling with distinct keys](scaling.png)",
		"| DELIFEQ | - | - | - | - | skipped: the server has no DELIFEQ |", "| 1 MiB | DELEX IFDEQ (XXH3 digest) | 61 |", "## Notes",
		"| stampede GetOrLoad + near cache | 4 | 1.00 | 1 | 0 of 2000 | 95.0% |", "| stampede GetOrLoad + near cache | 50000 | 50.00 | 100.0% | < 1 µs |",
		"| tight loop: a read every 1.00 µs, 99.9% near | all | 510 | 300 µs | 500 µs | 1.20 ms | 3.00 ms | 300 µs | 1.20 ms | 2 | 510 of 510 |",
		"| paced (sleep 50 µs): a read every 1.10 ms, 95.0% near | all | 510 | 1.10 ms |", "| flood: heap after GC | 55.0 MiB (≈ 91 666 entries at 629 B each) |"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	var text bytes.Buffer
	if err := WriteText(&text, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "naive cache-aside") || !strings.Contains(text.String(), "10000") {
		t.Errorf("text tables:\n%s", text.String())
	}
}

func TestWritePlots_partial(t *testing.T) {
	r := sample()
	r.Hot, r.HotSeries, r.ScaleKeys, r.Coherence = nil, nil, nil, nil
	if err := WritePlots(t.TempDir(), r); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(r.Plots, ","); got != "loader-calls.png,scaling.png" {
		t.Errorf("plots %s", got)
	}
}

func TestProgress_plain(t *testing.T) {
	var b bytes.Buffer
	p := NewProgress(&b, false, 2)
	p.Step("one", time.Second)
	p.Step("two", 0)
	p.Close()
	p.Close()
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "[1/2] one (") || !strings.HasPrefix(lines[1], "[2/2] two (") {
		t.Errorf("progress wrote %q", b.String())
	}
}

func TestProgress_terminal(t *testing.T) {
	var b bytes.Buffer // written only under Progress's lock, read after Close
	p := NewProgress(&b, true, 1)
	p.Step("step", time.Second)
	p.Close()
	if s := b.String(); !strings.Contains(s, "\r\033[K[1/1] step [") || !strings.HasSuffix(s, "\r\033[K") {
		t.Errorf("progress wrote %q", s)
	}
}
