// This file holds what the checker knows of tags (exp's values carry
// them, see expTags): the invalidations of the tags of a key or a load,
// and the validator of InvalidateTag's promise.

package main

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// valueLife bounds how long an exp value can be stored after its making
// began: its load's LoadTimeout, then its fresh and stale windows.
const valueLife = loadTimeout + expTTL + expStale

// invalidationsOf returns the InvalidateTag operations of tag that
// returned without error.
func (h *history) invalidationsOf(tag string) []*Record { return h.tagOps(kInvalidateTag, tag) }

// softInvalidationsOf returns the SoftInvalidateTag operations of tag
// that returned without error.
func (h *history) softInvalidationsOf(tag string) []*Record {
	return h.tagOps(kSoftInvalidateTag, tag)
}

// tagOps returns the operations of kind on tag that returned without
// error, indexed once for the run.
func (h *history) tagOps(kind, tag string) []*Record {
	if h.invalidations == nil {
		h.invalidations = map[string][]*Record{}
		for _, r := range h.ops {
			if (r.Kind == kInvalidateTag || r.Kind == kSoftInvalidateTag) && r.Return != 0 && r.Err == "" {
				h.invalidations[r.Kind+" "+r.Key] = append(h.invalidations[r.Kind+" "+r.Key], r)
			}
		}
	}
	return h.invalidations[kind+" "+tag]
}

// invalidatedBetween says whether an invalidation of one of tags overlaps
// [from, to], whatever its outcome (one that failed or whose process died
// may have taken effect): a hard one, or with soft a soft one too.
func (h *history) invalidatedBetween(tags []string, from, to int64, soft bool) bool {
	for _, r := range h.ops {
		if r.Call >= to {
			break // h.ops is in call order
		}
		if r.Kind != kInvalidateTag && (!soft || r.Kind != kSoftInvalidateTag) || !slices.Contains(tags, r.Key) {
			continue
		}
		end := r.Return
		if end == 0 {
			end = math.MaxInt64
		}
		if end > from {
			return true
		}
	}
	return false
}

// loadTags returns the tags a load's value is stored with: its
// operation's (a batch's are the union of its keys'), or, its operation
// unknown, those of every key it loaded and of every other key too (a
// batch's mates are not known: every tag of exp).
func (h *history) loadTags(l *Record) []string {
	if l.NS != "exp" {
		return nil
	}
	var keys []string
	if op := h.opByID[fmt.Sprint(l.Proc, "/", l.Op)]; op != nil {
		keys = op.Keys
		if op.Key != "" {
			keys = []string{op.Key}
		}
	} else {
		for i := range expKeys {
			keys = append(keys, fmt.Sprintf("e%d", i))
		}
	}
	var tags []string
	for _, k := range keys {
		for _, t := range expTags(k) {
			if !slices.Contains(tags, t) {
				tags = append(tags, t)
			}
		}
	}
	return tags
}

// checkInvalidate: once InvalidateTag of a tag has returned, no read
// (GetOrLoad, a GetOrLoadMany's key, Get, stale or not) of a key with
// that tag that starts afterwards returns a value whose load began, or
// whose Set returned, before the invalidation was called — at once in the
// invalidating process and without near caches, within the near cache's
// bound in the others. Every value of an exp key carries the key's own
// tags (a batch's, its mates' too), so the invalidations that count for
// a read are those of the key's own tags. Excused (counted): reads while
// failing open, and invalidations acknowledged during a TAKEOVER of
// their record's shard, which may lose the record's write (the value
// then reads as current). A restart loses nothing acknowledged (the
// server syncs every write), and a record that is gone reads as an
// invalidation: neither excuses anything.
func checkInvalidate(h *history, o checkOptions, res *result) {
	checkTagReads(h, o, res, "invalidate", h.invalidationsOf, "", nil)
}

// checkTagReads checks the reads of exp keys (of the kind only, "" for
// every kind) against the invalidations of their tags that invsOf
// returns: a read that returns a value made
// before such an invalidation that returned before the read began is a
// violation unless allowed(r) (nil: none is; then every read counts as
// checked, and those within a value's life of an invalidation once more;
// otherwise only the reads after one) or a window excuses it.
func checkTagReads(h *history, o checkOptions, res *result, name string, invsOf func(tag string) []*Record, only string, allowed func(r *Record) bool) {
	ix := map[string]writeIndex{} // by exp key: the invalidations of its tags
	for _, r := range h.ops {
		if r.NS != "exp" || only != "" && r.Kind != only {
			continue
		}
		reads(r, func(key, v string) {
			or, ok := h.originOf(v)
			if !ok {
				return // the values check says so
			}
			iix, ok := ix[key]
			if !ok {
				var invs []*Record
				for _, t := range expTags(key) {
					invs = append(invs, invsOf(t)...)
				}
				iix = indexWrites(invs)
				ix[key] = iix
			}
			inv := iix.latestBefore(r.Call)
			if allowed == nil {
				res.Checked[name]++
				if inv != nil && r.Call-inv.Return < int64(valueLife) {
					// A value from before it may still be stored: the
					// cases that test the promise.
					res.Checked[name+" (within a value's life of one)"]++
				}
			}
			if inv == nil || inv.Call <= or.from {
				return
			}
			if allowed != nil {
				res.Checked[name]++
				if allowed(r) {
					return
				}
			}
			// inv was called after v's making began and returned before
			// r was called. Allow the near cache's bound across
			// processes.
			if r.Near && inv.Proc != r.Proc {
				if inv2 := iix.latestBefore(r.Call - int64(o.nearBound)); inv2 == nil || inv2.Call <= or.from {
					res.excuse(name, "within the near cache's bound")
					return
				}
			}
			if failingOpen(r) || (or.load != nil && h.failOpen(or.load)) {
				res.excuse(name, "read while failing open")
				return
			}
			if h.takeoverOf(inv.Kind, inv.NS, inv.Key, inv.Call, inv.Return) != nil {
				res.excuse(name, "an invalidation a TAKEOVER failover of its record's shard may have lost")
				return
			}
			src := or.set
			if src == nil {
				src = or.load
			}
			res.violate(name, fmt.Sprintf("%s of %s/%s returned %s (%s), made %s before a %s of %s that returned %s before the read began",
				r.Kind, r.NS, key, v, readFlags(r, key), time.Duration(inv.Call-or.start), inv.Kind, inv.Key, time.Duration(r.Call-inv.Return)), r, inv, src)
		})
	}
}

// readFlags describes how a read was answered, for reports: the
// Observer's flags for its key, and a Get's staleness.
func readFlags(r *Record, key string) string {
	fl := fmt.Sprint(r.Flags[key])
	if r.ErrKind == "stale" {
		fl += " stale"
	}
	if r.Near {
		fl += " near"
	}
	return fl
}

// checkSoftInvalidate: once SoftInvalidateTag of a tag has returned, a
// Get of a key with that tag that starts afterwards and returns a value
// whose load began, or whose Set returned, before the soft invalidation
// was called returns it as stale (ErrStale) — at once in the invalidating
// process and without near caches, within the near cache's bound in the
// others. (GetOrLoad and GetOrLoadMany do not tell a stale value from a
// fresh one; that no value from before a hard invalidation is served, a
// soft one before it or not, is checkInvalidate's.) Excused, counted:
// as for checkInvalidate.
func checkSoftInvalidate(h *history, o checkOptions, res *result) {
	checkTagReads(h, o, res, "soft-invalidate", h.softInvalidationsOf, kGet, func(r *Record) bool { return r.ErrKind == "stale" })
}
