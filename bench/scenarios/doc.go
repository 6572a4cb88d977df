// Package scenarios holds the bench's scenarios, one per file, and the
// machinery they share: worker processes ("pods") that run the requests,
// the approaches they compare, and latency summaries.
//
// # Pods
//
// A pod is the bench binary started again with STAMPEDE_BENCH_POD=1 (see
// IsPod and PodMain): a separate OS process with its own connections to
// the server, as a service instance is. Pods live for the whole run and
// take one job at a time over stdin/stdout:
//
//	parent → pod   {job as JSON}
//	pod → parent   ready                 (connected, approach built, warmed)
//	parent → pod   go <unix-ns>          (start at that instant)
//	pod → parent   result {JSON}         (or: error <text>)
//
// A pod exits when its stdin closes, so pods never outlive the bench.
//
// # Keys
//
// Every key a run writes starts with "bench:<run id>:" and has a TTL, or is
// deleted by the parent once read (counters, load logs); Env.Cleanup
// removes what is left at the end.
package scenarios
