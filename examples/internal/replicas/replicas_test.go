package replicas

import "testing"

func TestSummarise(t *testing.T) {
	for _, c := range []struct {
		name  string
		lines []string
		ok    bool
	}{
		{"once per tick", []string{"10:00:00 0 ran the job", "10:00:00 1 skipped", "10:00:01 1 ran the job", "10:00:01 0 skipped (held by instance-1)"}, true},
		{"twice in a tick", []string{"10:00:00 0 ran the job", "10:00:00 1 ran the job", "10:00:01 1 ran the job"}, false},
		{"a tick nobody ran", []string{"10:00:00 0 ran the job", "10:00:01 0 skipped", "10:00:01 1 skipped"}, false},
		{"a tick missing", []string{"10:00:00 0 ran the job"}, false},
		{"a stray line", []string{"10:00:00 0 ran the job", "hello", "10:00:01 1 ran the job"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := summarise(c.lines, 2)
			if (err == nil) != c.ok {
				t.Fatalf("summarise = %v, want ok=%v", err, c.ok)
			}
		})
	}
}
