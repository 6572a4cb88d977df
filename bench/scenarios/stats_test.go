package scenarios

import (
	"testing"
	"time"

	"github.com/hotkv/stampede/bench/report"
)

func TestSummarize(t *testing.T) {
	tests := []struct {
		name string
		us   []int64
		want report.Latency
	}{
		{"empty", nil, report.Latency{}},
		{"one", []int64{1500}, report.Latency{N: 1, P50: 1.5, P99: 1.5, P999: 1.5, Max: 1.5}},
		{"nearest rank", []int64{4000, 1000, 3000, 2000}, report.Latency{N: 4, P50: 2, P99: 4, P999: 4, Max: 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := summarize(tt.us); got != tt.want {
				t.Errorf("summarize(%v) = %+v, want %+v", tt.us, got, tt.want)
			}
		})
	}
	var hundred []int64
	for i := range 1000 {
		hundred = append(hundred, int64(1000-i)*1000)
	}
	if got := summarize(hundred); got.P50 != 500 || got.P99 != 990 || got.P999 != 999 || got.Max != 1000 {
		t.Errorf("summarize(1..1000 ms) = %+v", got)
	}
}

func TestHotSummary_expiries(t *testing.T) {
	cfg := Config{Procs: 2, Rate: 100, TTL: time.Second, Load: 100 * time.Millisecond}
	tests := []struct {
		name          string
		loads         []float64
		wantExpiries  int
		wantPerExpiry float64
		wantMax       int
	}{
		{"no loads", nil, 0, 0, 0},
		{"one per expiry", []float64{1.0, 2.1, 3.2}, 3, 1, 1},
		{"a burst per expiry", []float64{1.0, 1.01, 1.09, 2.1, 2.15}, 2, 2.5, 3},
		{"loads just under TTL/2 apart are one expiry", []float64{1.0, 1.49}, 1, 2, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := []podResult{{Requests: 3, Lat: []int64{500, 90_000, 700}, At: []int64{500_000, 1_050_000, 1_500_000}}}
			h, s := hotSummary("naive", res, tt.loads, cfg, 200*time.Millisecond)
			if h.Expiries != tt.wantExpiries || h.LoadsPerExpiry != tt.wantPerExpiry || h.MaxLoadsPerExpiry != tt.wantMax {
				t.Errorf("expiries %d, loads/expiry %.2f, max %d; want %d, %.2f, %d",
					h.Expiries, h.LoadsPerExpiry, h.MaxLoadsPerExpiry, tt.wantExpiries, tt.wantPerExpiry, tt.wantMax)
			}
			if len(s.Expiries) != tt.wantExpiries || len(s.At) != 3 {
				t.Errorf("series has %d expiries and %d requests", len(s.Expiries), len(s.At))
			}
			if h.Waited != 1 {
				t.Errorf("waited %d, want 1 (the 90 ms request)", h.Waited)
			}
			if tt.wantExpiries > 0 && tt.loads[0] == 1.0 && h.AfterExpiry.N != 1 {
				t.Errorf("%d requests after an expiry, want 1 (the one 50 ms after it)", h.AfterExpiry.N)
			}
		})
	}
}
