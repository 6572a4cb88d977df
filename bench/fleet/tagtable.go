package main

import (
	"fmt"
	"io"
	"slices"
	"time"
)

// printTags writes the tag measurement's tables.
func printTags(w io.Writer, r *tagRun) {
	c := r.Cfg
	fmt.Fprintf(w, "Tag invalidation across a fleet (issue 40): %d values under %d tags (key i: tag i mod %d, %d values a tag), values of %d B, on one Redis 8.6 server. "+
		"%d reading processes with near caches (MaxEntries %d), each holding every value (read in with GetOrLoadMany; on a second read its near cache answered %d of %d in the process with the fewest; loader calls meanwhile: %d), and 1 process that invalidates and writes. Readers poll every %v (a time.Sleep; in practice about a millisecond).\n\n",
		c.keys, c.tags, c.tags, c.perTag(), c.value, c.readers, c.keys+c.tags+1000, r.HeldNear, r.Held, r.HoldLoads, c.pace)

	fmt.Fprintln(w, "Hard invalidation against a plain Set, rounds alternating in one run: from the call's return to each reader no longer serving the old value (InvalidateTag: each reader polls a value of its own of the tag; Set: every reader polls the one key)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| call | calls | round trips per call (commands) | call p50 / p99 ms | reader samples | coherence p50 / p90 / p99 / max ms | of which dropped p50 / p99 ms | from the call's start p50 / p99 ms | early | read before from the near cache | tracking msgs per call | values of the tag served after the reader saw the change |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|")
	row := func(name string, s opStats, sweep bool) {
		served := "–"
		if sweep {
			served = fmt.Sprintf("%d of %d reads", s.Served, s.Swept)
		}
		fmt.Fprintf(w, "| %s | %d | %s (%s) | %.2f / %.2f | %d | %.2f / %.2f / %.2f / %.2f | %.2f / %.2f | %.2f / %.2f | %d | %d | %.2f | %s |\n",
			name, s.Calls, spread(s.RoundTrips), spread(s.Cmds), msf(percentile(s.CallLat, 50)), msf(percentile(s.CallLat, 99)),
			len(s.Coh), msf(percentile(s.Coh, 50)), msf(percentile(s.Coh, 90)), msf(percentile(s.Coh, 99)), msf(percentile(s.Coh, 100)),
			msf(percentile(s.Dropped, 50)), msf(percentile(s.Dropped, 99)), msf(percentile(s.FromStart, 50)), msf(percentile(s.FromStart, 99)), s.Early, s.NearBefore, float64(s.Msgs)/float64(max(1, s.Calls)), served)
	}
	row(fmt.Sprintf("`InvalidateTag` (a tag of %d values, each in %d near caches)", c.perTag(), c.readers), r.Hard, true)
	row(fmt.Sprintf("`Set` (one key in %d near caches)", c.readers), r.Set, false)
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Coherence of InvalidateTag against Set in the same run: p50 %s, p99 %s, max %s; from the call's start: p99 %s; until the near cache let the value go (dropped): p50 %s, p99 %s. "+
		"\"Dropped\" is the server's message reaching the reader; the rest is the reader's read that finds the change (Set: the new value, one round trip; InvalidateTag: its tag's record alone, one, the value being in the near cache still).\n\n",
		ratio(percentile(r.Hard.Coh, 50), percentile(r.Set.Coh, 50)), ratio(percentile(r.Hard.Coh, 99), percentile(r.Set.Coh, 99)),
		ratio(percentile(r.Hard.Coh, 100), percentile(r.Set.Coh, 100)), ratio(percentile(r.Hard.FromStart, 99), percentile(r.Set.FromStart, 99)),
		ratio(percentile(r.Hard.Dropped, 50), percentile(r.Set.Dropped, 50)), ratio(percentile(r.Hard.Dropped, 99), percentile(r.Set.Dropped, 99)))

	s := r.Soft
	fmt.Fprintf(w, "Soft invalidation: after each SoftInvalidateTag every reader, once its near cache was told (the tag's record dropped), reads every value of the tag once with GetOrLoad, while the loaders of the refreshes this starts wait until every reader has read (a read that waited for one would time out)\n\n")
	fmt.Fprintln(w, "| calls | round trips per call (commands) | call p50 / p99 ms | told p50 / p99 / max ms (early) | values (each in every near cache) | reads | served the old value | of which counted stale | served the new | served as fresh | waited | errors | read p50 / p99 / max ms | loader calls, fleet | per value |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	errs := fmt.Sprint(s.Errs)
	if s.FirstErr != "" {
		errs += " (" + s.FirstErr + ")"
	}
	fmt.Fprintf(w, "| %d | %s (%s) | %.2f / %.2f | %.2f / %.2f / %.2f (%d) | %d | %d | %d | %d | %d | %d | %d | %s | %.3f / %.3f / %.3f | %d | %.2f |\n",
		s.Rounds, spread(s.RoundTrips), spread(s.Cmds), msf(percentile(s.CallLat, 50)), msf(percentile(s.CallLat, 99)),
		msf(percentile(s.Coh, 50)), msf(percentile(s.Coh, 99)), msf(percentile(s.Coh, 100)), s.Early, s.Values, s.Calls,
		s.Old, s.StaleHits, s.New, s.Hits, s.Waits, errs, msf(percentile(s.Lat, 50)), msf(percentile(s.Lat, 99)), msf(percentile(s.Lat, 100)),
		s.Loads, float64(s.Loads)/float64(max(1, s.Values)))
	fmt.Fprintf(w, "\n(The first SoftInvalidateTag on the server, of %q before the measured ones, took %d round trips: the server did not know the script yet.)\n\n", r.SoftWarmTag, r.SoftWarmRoundTrips)

	fmt.Fprintf(w, "Bytes per InvalidateTag: one process reads the tag (tag0; after each call it is told, and reads one of its values again, so that the server tracks the record for the next), alone or with idle processes holding every other tag's values in their near caches; plus the invalidating process in both\n\n")
	fmt.Fprintln(w, "| processes | idle | values held: reader / each idle | calls | seconds | round trips per call | server B per call | of which command replies | of which tracking and pub/sub | tracking msgs to the reader per call | msgs to idle processes | B read by idle processes per call | ratio to the reader alone |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	var base float64
	for _, p := range r.Bytes {
		b := p.perCall(p.ServerBytes)
		if p.Idle == 0 {
			base = b
		}
		fmt.Fprintf(w, "| %d | %d | %d / %d | %d | %.2f | %.2f | %.0f | %.0f | %.0f | %.2f | %d | %.1f | %.2fx |\n",
			p.N, p.Idle, p.ReaderHeld, p.HeldPerIdle, p.Calls, p.Elapsed.Seconds(), p.perCall(p.RoundTrips), b,
			p.perCall(p.CmdBytes), p.perCall(p.SubBytes), p.perCall(p.ReaderMsgs), p.IdleMsgs, p.perCall(p.IdleBytes), b/base)
	}
	if r.Errors > 0 {
		fmt.Fprintf(w, "\nErrors: %d (first: %s)\n", r.Errors, r.FirstErr)
	}
}

// spread is "n" if every value is n, else "min–max".
func spread(v []int64) string {
	if len(v) == 0 {
		return "–"
	}
	lo, hi := slices.Min(v), slices.Max(v)
	if lo == hi {
		return fmt.Sprint(lo)
	}
	return fmt.Sprintf("%d–%d", lo, hi)
}

// ratio is a / b as "1.23x", or "–" when b is 0.
func ratio(a, b time.Duration) string {
	if b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2fx (%.2f / %.2f ms)", float64(a)/float64(b), msf(a), msf(b))
}
