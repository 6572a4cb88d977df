package scenarios

import (
	"strings"
	"testing"
)

func TestCoherenceSummary(t *testing.T) {
	ms := int64(1e6)
	writes := []cohWrite{
		{Kind: "set", ID: 0, At: 0},
		{Kind: "Set", ID: 1, At: 10 * ms},
		{Kind: "refresh", ID: 2, At: 20 * ms},
		{Kind: "Delete", ID: cohMiss, At: 30 * ms},
	}
	marks := []cohMark{
		{State: cohMiss},
		{State: 0, At: 1 * ms, Began: 1 * ms},
		{State: 1, At: 12 * ms, Began: 11 * ms, NearBefore: true},
		{State: 2, At: 20*ms - 1, Began: 20*ms - 2, NearBefore: true}, // before the writer's call returned
		{State: cohMiss, At: 33 * ms, Began: 32 * ms},
		{State: cohStop},
	}
	c, err := coherenceSummary(writes, marks)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		n, early, near int
		p50, dropped   float64
	}{
		"Set":     {1, 0, 1, 2, 1},
		"refresh": {1, 1, 1, 0, 0},
		"Delete":  {1, 0, 0, 3, 2},
		"all":     {3, 1, 2, 2, 1},
	}
	if len(c.Rows) != 4 {
		t.Fatalf("%d rows", len(c.Rows))
	}
	for _, r := range c.Rows {
		w := want[r.Write]
		if r.Latency.N != w.n || r.Early != w.early || r.NearBefore != w.near || r.Latency.P50 != w.p50 || r.Dropped.P50 != w.dropped {
			t.Errorf("%s: %+v, want %+v", r.Write, r, w)
		}
	}
	if got := c.Samples["Delete"]; len(got) != 1 || got[0] != 3 {
		t.Errorf("Delete samples %v", got)
	}

	tests := []struct {
		name    string
		marks   []cohMark
		wantErr string
	}{
		{"a change missed", marks[:5], "the reader saw 5 changes"},
		{"another state", append(append([]cohMark{}, marks[:2]...), cohMark{State: 7}, marks[3], marks[4], marks[5]), "leads to 1, the reader saw 7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := coherenceSummary(writes, tt.marks)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			}
		})
	}
}
