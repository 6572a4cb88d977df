package report

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Results is everything one bench run measured. It is filled in by one
// goroutine at a time (the orchestrator) and is not safe for concurrent
// use.
type Results struct {
	Started   time.Time `json:"started"`
	ElapsedS  float64   `json:"elapsed_s"`
	Command   string    `json:"command"`
	Machine   Machine   `json:"machine"`
	Server    Server    `json:"server"`
	Config    Config    `json:"config"`
	Scenarios []string  `json:"scenarios"`

	Cold       []Cold    `json:"cold,omitempty"`
	Hot        []Hot     `json:"hot,omitempty"`
	Hit        []Hit     `json:"hit,omitempty"`
	Lock       []Lock    `json:"lock,omitempty"`
	ColdGap    []ColdGap `json:"cold_gap,omitempty"`
	LockGap    []LockGap `json:"lock_gap,omitempty"`
	Large      []Large   `json:"large,omitempty"`
	ScaleProcs []Scale   `json:"scale_procs,omitempty"`
	ScaleKeys  []Scale   `json:"scale_keys,omitempty"`

	// The near cache (cache.Options.Near).
	NearHit   []NearHit  `json:"near_hit,omitempty"`
	Coherence *Coherence `json:"coherence,omitempty"`
	// CoherencePaced is Coherence with a reader that sleeps between reads.
	CoherencePaced *Coherence  `json:"coherence_paced,omitempty"`
	NearMemory     *NearMemory `json:"near_memory,omitempty"`

	// PagePurge is the page purge scenario: every phase of each approach.
	PagePurge []PagePurge `json:"page_purge,omitempty"`
	// BatchRefresh is the batched refresh scenario: each approach's run.
	BatchRefresh []BatchRefresh `json:"batch_refresh,omitempty"`

	// BackendCap is the backend-cap scenario: the uncapped run, then the
	// capped one.
	BackendCap []BackendCap `json:"backend_cap,omitempty"`

	// Notes are things a reader must know: what was skipped and why.
	Notes []string `json:"notes,omitempty"`
	// Plots are the file names of the plots, relative to the output folder.
	Plots []string `json:"plots,omitempty"`

	// HotSeries holds every request of the hot-key runs, for the plots;
	// too long for results.json.
	HotSeries []HotSeries `json:"-"`
}

// Machine describes where the bench ran.
type Machine struct {
	GOOS, GOARCH string
	CPUs         int
	Go           string
	CPU          string `json:"cpu,omitempty"`
	// Load is the system's load averages (1, 5, 15 min) at the start and
	// at the end of the run, where the system says them: the machine may
	// be shared.
	Load string `json:"load,omitempty"`
}

// Server describes the server the bench ran against.
type Server struct {
	// Kind is "embedded miniredis" or "external".
	Kind string `json:"kind"`
	// Addr is host:port, never with credentials.
	Addr string `json:"addr"`
	// Capabilities is what stampede's probe found, e.g.
	// "redis 8.6.3: release=DELEX IFEQ extend=SET IFEQ digest=IFDEQ (XXH3)".
	Capabilities string `json:"capabilities"`
}

// Config is what the run was asked to do.
type Config struct {
	Procs       int     `json:"procs"`
	Goroutines  int     `json:"goroutines"`
	LoadMs      float64 `json:"load_ms"`
	Rate        float64 `json:"rate_per_s"`
	DurationS   float64 `json:"duration_s"`
	TTLms       float64 `json:"ttl_ms"`
	Quick       bool    `json:"quick"`
	ScaleProcs  []int   `json:"scale_procs"`
	ScaleKeys   []int   `json:"scale_keys"`
	ScaleLoadMs float64 `json:"scale_load_ms"`

	CoherenceCycles int `json:"coherence_cycles,omitempty"`
	MemEntries      int `json:"near_memory_entries,omitempty"`
	FloodKeys       int `json:"flood_keys,omitempty"`
	FloodMax        int `json:"flood_max_entries,omitempty"`

	Reps int `json:"reps,omitempty"` // the gap scenarios' runs per approach

	// The page purge scenario: requests per second over all processes,
	// each phase's length and the page's render time.
	PageRate     float64 `json:"page_rate_per_s,omitempty"`
	PagePhaseS   float64 `json:"page_phase_s,omitempty"`
	PageRenderMs float64 `json:"page_render_ms,omitempty"`
}

// Latency summarises request times, in milliseconds.
type Latency struct {
	N    int     `json:"n"`
	P50  float64 `json:"p50_ms"`
	P99  float64 `json:"p99_ms"`
	P999 float64 `json:"p999_ms"`
	Max  float64 `json:"max_ms"`
}

// Cold is one approach in the cold stampede: Procs × Goroutines callers
// asking for one absent key at the same moment.
type Cold struct {
	Approach    string  `json:"approach"`
	Procs       int     `json:"procs"`
	Goroutines  int     `json:"goroutines"`
	Requests    int     `json:"requests"`
	Errors      int     `json:"errors"`
	FirstError  string  `json:"first_error,omitempty"`
	LoaderCalls int64   `json:"loader_calls"`
	Latency     Latency `json:"latency"`
	// NearHits counts requests answered from the near cache (approach
	// "stampede-near" only).
	NearHits int64 `json:"near_hits,omitempty"`
}

// Hot is one approach in the hot-key expiry scenario.
type Hot struct {
	Approach   string  `json:"approach"`
	Procs      int     `json:"procs"`
	Rate       float64 `json:"rate_per_s"`
	Requests   int     `json:"requests"`
	Errors     int     `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	// Loads counts loader calls after the start (the warm-up excluded);
	// Expiries the bursts of loads they form (loads less than TTL/2 apart
	// belong to one expiry).
	Loads             int     `json:"loads"`
	Expiries          int     `json:"expiries"`
	LoadsPerExpiry    float64 `json:"loads_per_expiry"`
	MaxLoadsPerExpiry int     `json:"max_loads_per_expiry"`
	// Waited counts requests that took longer than half the load time:
	// callers that waited for a load instead of being served.
	Waited   int     `json:"waited"`
	Overall  Latency `json:"latency"`
	WindowMs float64 `json:"window_ms"`
	// AfterExpiry covers requests started within WindowMs after the first
	// load of each expiry.
	AfterExpiry Latency `json:"latency_after_expiry"`
	// NearHits counts requests answered from the near cache (approach
	// "stampede-near" only).
	NearHits int64 `json:"near_hits,omitempty"`
}

// HotSeries is every request of one hot-key run (when it started, in
// seconds since the run's start, and its latency), the start of every load
// and the first load of every expiry.
type HotSeries struct {
	Approach        string
	At, LatMs       []float64
	Loads, Expiries []float64
}

// Hit is one way of serving a fresh value.
type Hit struct {
	Mode       string  `json:"mode"`
	Procs      int     `json:"procs"`
	Goroutines int     `json:"goroutines"`
	Ops        int     `json:"ops"`
	Errors     int     `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	PerSec     float64 `json:"ops_per_s"`
	Latency    Latency `json:"latency"`
}

// Lock is obtain+release cycles with one release strategy forced.
type Lock struct {
	Strategy   string  `json:"strategy"`
	Skipped    string  `json:"skipped,omitempty"`
	Goroutines int     `json:"goroutines"`
	Cycles     int     `json:"cycles"`
	Errors     int     `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	PerSec     float64 `json:"cycles_per_s"`
	Latency    Latency `json:"latency"`
}

// Large is compare-and-delete of one value size by one method.
type Large struct {
	Size       int     `json:"size"`
	Method     string  `json:"method"`
	Skipped    string  `json:"skipped,omitempty"`
	Iterations int     `json:"iterations"`
	Errors     int     `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	BytesSent  float64 `json:"bytes_sent_per_op"`
	Latency    Latency `json:"latency"`
}

// Scale is one point of a scaling curve: a cold stampede with X
// processes (Axis "procs") or over X distinct keys (Axis "keys").
type Scale struct {
	Axis        string  `json:"axis"`
	X           int     `json:"x"`
	Approach    string  `json:"approach"`
	Procs       int     `json:"procs"`
	Keys        int     `json:"keys"`
	Requests    int     `json:"requests"`
	Errors      int     `json:"errors"`
	FirstError  string  `json:"first_error,omitempty"`
	LoaderCalls int64   `json:"loader_calls"`
	Latency     Latency `json:"latency"`
}

// Approaches returns the approaches in r, in the order they first appear.
func (r *Results) Approaches() []string {
	var out []string
	add := func(a string) {
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	for _, c := range r.Cold {
		add(c.Approach)
	}
	for _, h := range r.Hot {
		add(h.Approach)
	}
	for _, s := range r.ScaleProcs {
		add(s.Approach)
	}
	for _, s := range r.ScaleKeys {
		add(s.Approach)
	}
	return out
}

// WriteJSON writes r to dir/results.json.
func WriteJSON(dir string, r *Results) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("report: encode results: %w", err)
	}
	return os.WriteFile(filepath.Join(dir, "results.json"), append(b, '\n'), 0o644)
}

// ReadJSON reads dir/results.json.
func ReadJSON(dir string) (*Results, error) {
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		return nil, err
	}
	var r Results
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("report: decode results: %w", err)
	}
	return &r, nil
}
