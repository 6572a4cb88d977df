package striped

import (
	"sync"
	"testing"
)

func TestCounter_IncLoad(t *testing.T) {
	var c Counter
	if n := c.Load(); n != 0 {
		t.Fatalf("zero Counter: Load = %d, want 0", n)
	}
	const goroutines, each = 8, 1000
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range each {
				c.Inc()
			}
		})
	}
	wg.Wait()
	if n := c.Load(); n != goroutines*each {
		t.Fatalf("Load = %d, want %d", n, goroutines*each)
	}
}

func BenchmarkCounter_Inc(b *testing.B) {
	var c Counter
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c.Inc()
		}
	})
}
