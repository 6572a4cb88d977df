package stampedeotel

// TracedNotes returns how many notes of Traced's t holds, that no
// CacheObserver took yet (see noteTraced).
func TracedNotes(t *Telemetry) int {
	n := 0
	t.traced.Range(func(any, any) bool {
		n++
		return true
	})
	return n
}
