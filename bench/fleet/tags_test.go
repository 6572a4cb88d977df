package main

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"
)

// TestTags_short is the tag measurement's short form (-tags, issue 40):
// 200 values under 10 tags in the near caches of 3 reading processes,
// and one that invalidates. It asserts counts, not times: each
// InvalidateTag and SoftInvalidateTag is one round trip of one command;
// once a reader has seen a value of the tag invalidated it is served none
// of them, and every reader is sent at most one tracking message per
// InvalidateTag, however many of the tag's values it holds; after a soft
// invalidation every read is served the old value, stale, none waits, and
// the loader runs once per value across the fleet; and the server's bytes
// per InvalidateTag with 2 idle processes (their near caches holding every
// other tag's values) stay within 1.5x those with the reader alone, the
// idle ones being sent nothing.
func TestTags_short(t *testing.T) {
	tc := tagConfig{keys: 200, tags: 10, readers: 3, rounds: 4, soft: 2, bytesRounds: 20, idle: 2, pace: 50 * time.Microsecond, value: 100}
	if err := tc.check(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	ct, err := newController(ctx, config{procs: []int{tc.readers + 1}, value: tc.value, tag: &tc})
	if errors.Is(err, os.ErrNotExist) && os.Getenv("CI") != "true" {
		t.Skipf("no server binary: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer ct.close()
	r, err := ct.runTags(ctx, tc, func(string) {})
	if err != nil {
		t.Fatal(err)
	}
	if r.Errors > 0 {
		t.Errorf("%d calls failed, the first: %s", r.Errors, r.FirstErr)
	}
	perTag := tc.perTag()

	hard := r.Hard
	for i := range hard.Calls {
		if hard.RoundTrips[i] != 1 || hard.Cmds[i] != 1 {
			t.Errorf("InvalidateTag %d: %d round trips of %d commands, want 1 of 1", i, hard.RoundTrips[i], hard.Cmds[i])
		}
	}
	if want := tc.rounds * tc.readers; len(hard.Coh) != want || len(r.Set.Coh) != want {
		t.Errorf("readers saw %d InvalidateTag and %d Set changes, want %d each", len(hard.Coh), len(r.Set.Coh), want)
	}
	if want := tc.rounds * tc.readers * perTag; hard.Served != 0 || hard.Swept != want {
		t.Errorf("after seeing the change readers were served %d of %d reads of the tag's values, want 0 of %d", hard.Served, hard.Swept, want)
	}
	if most := int64(tc.rounds * tc.readers); hard.Msgs > most {
		t.Errorf("%d tracking messages for %d InvalidateTag calls to %d readers each holding %d values of the tag, want at most %d (one a reader)",
			hard.Msgs, tc.rounds, tc.readers, perTag, most)
	}

	s := r.Soft
	for i := range s.Rounds {
		if s.RoundTrips[i] != 1 || s.Cmds[i] != 1 {
			t.Errorf("SoftInvalidateTag %d: %d round trips of %d commands, want 1 of 1", i, s.RoundTrips[i], s.Cmds[i])
		}
	}
	if want := tc.soft * tc.readers * perTag; s.Calls != want || s.Old != want || s.StaleHits != int64(want) || s.Errs > 0 {
		t.Errorf("after SoftInvalidateTag: %d reads, %d served the old value, %d counted stale, %d failed (%s); want all %d old and stale",
			s.Calls, s.Old, s.StaleHits, s.Errs, s.FirstErr, want)
	}
	if s.Waits != 0 {
		t.Errorf("after SoftInvalidateTag %d reads waited for a load, want none", s.Waits)
	}
	if s.Loads != int64(s.Values) || s.Values != tc.soft*perTag {
		t.Errorf("soft: %d loader calls in the fleet for %d values, want one per value (%d)", s.Loads, s.Values, tc.soft*perTag)
	}

	if len(r.Bytes) != 2 {
		t.Fatalf("bytes phase: %d points, want 2", len(r.Bytes))
	}
	alone, fleet := r.Bytes[0], r.Bytes[1]
	for _, p := range r.Bytes {
		if p.RoundTrips != int64(p.Calls) || p.ReaderMsgs != int64(p.Calls) {
			t.Errorf("%d idle: %d round trips and %d tracking messages to the reader for %d InvalidateTag calls, want one each per call",
				p.Idle, p.RoundTrips, p.ReaderMsgs, p.Calls)
		}
	}
	if fleet.IdleMsgs != 0 {
		t.Errorf("idle processes were sent %d messages, want 0", fleet.IdleMsgs)
	}
	b1, bn := alone.perCall(alone.ServerBytes), fleet.perCall(fleet.ServerBytes)
	if ratio := bn / b1; !(ratio <= 1.5) {
		t.Errorf("server bytes per InvalidateTag with %d idle processes are %.2fx those with the reader alone (%.0f B against %.0f B), want at most 1.5x",
			fleet.Idle, ratio, bn, b1)
	}
}
