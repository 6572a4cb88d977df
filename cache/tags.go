package cache

import (
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkv/stampede/internal/codec"
	"github.com/hotkv/stampede/internal/redisx"
)

// Tags (WithTags, InvalidateTag, SoftInvalidateTag).
//
// An invalidation touches one small record per tag, never the values:
// each tag has a record (NS:{tag T}: two random epochs, hard and soft, in
// an entry of its own), and each value stored with tags carries the
// epochs of its tags' records that its load (or Set) read before it
// began. A hard invalidation draws both epochs anew, a soft one the soft
// epoch only. A reader compares (see tagState): a hard epoch that differs,
// or a record that is gone (expired, evicted, lost in a failover: purged
// at a time nobody knows), means the value is invalidated, and the reader
// treats it as it treats a value it cannot use: one load in the cluster
// replaces it while the callers wait. A soft epoch that differs makes the
// value stale: it goes on being served while one background refresh in
// the cluster replaces it.
//
// So an invalidation costs one write per tag however many values it has,
// and the server keeps no set of keys per tag. The records are entries
// like any other: with the near cache on, a reader checks them in memory,
// and an invalidation reaches every process that read the record through
// the server's tracking, as any write does, and no other process.
//
// A load that was running when its tag was invalidated read its epochs
// before: the value it writes carries them, and is invalidated for every
// reader from the moment it is stored. A caller that joins such a load in
// its process checks the epochs too (see outcome.tagsCurrent).

// Bounds of one value's tags.
const (
	maxTags   = 64
	maxTagLen = 1024
)

// recordKeys returns the keys of tag's record: "NS:{tag " + the tag's
// hash tag + "}". A user key's hash tag (redisx.Tag) never holds a space,
// so a record never shares a key with a value.
func (c *Cache) recordKeys(tag string) keys {
	t := recordTag(tag)
	return keys{user: tag, tag: t, value: c.s.ns + ":{" + t + "}"}
}

// recordTag is the hash tag of tag's record, which is also its key in
// the near cache.
func recordTag(tag string) string { return "tag " + redisx.Tag(tag) }

// record is a tag record's two epochs. Records draw them at random, never
// zero: a zero epoch in a value's tags (see tagRefs) matches no record.
type record struct{ hard, soft uint64 }

// recordSize is the length of a record's payload: hard, then soft.
const recordSize = 16

func newEpoch() uint64 {
	for {
		if e := rand.Uint64(); e != 0 {
			return e
		}
	}
}

// recordBytes encodes r as an entry fresh for life.
func (c *Cache) recordBytes(r record, life time.Duration) string {
	var p [recordSize]byte
	binary.BigEndian.PutUint64(p[:8], r.hard)
	binary.BigEndian.PutUint64(p[8:], r.soft)
	now := c.s.now()
	return string(codec.Append(nil, codec.Entry{Written: now, FreshUntil: now.Add(life), NoStale: true, Payload: p[:]}))
}

// decodeRecord parses a record as stored.
func decodeRecord(raw []byte) (record, bool) {
	e, err := codec.Decode(raw)
	if err != nil {
		return record{}, false
	}
	return recordOf(e)
}

func recordOf(e codec.Entry) (record, bool) {
	if len(e.Payload) != recordSize || e.NotFound || len(e.Tags) > 0 {
		return record{}, false
	}
	return record{hard: binary.BigEndian.Uint64(e.Payload), soft: binary.BigEndian.Uint64(e.Payload[8:])}, true
}

// tagState is what a value's tags say of it now.
type tagState uint8

const (
	tagsCurrent    tagState = iota // no tag was invalidated since its load
	tagsSoft                       // a tag was invalidated softly: the value is stale
	tagsUnverified                 // a record could not be read (the server failed to answer): not known now
	tagsHard                       // a tag was invalidated, or its record is gone or is no record
)

// against is what r says of a value that saw ref.
func (r record) against(ref codec.TagRef) tagState {
	switch {
	case r.hard != ref.Hard:
		return tagsHard
	case r.soft != ref.Soft:
		return tagsSoft
	}
	return tagsCurrent
}

// nearRecord returns tag's record from the near cache, if it holds it.
func (c *Cache) nearRecord(tag string, now time.Time) (record, bool) {
	if c.near == nil {
		return record{}, false
	}
	ne := c.near.lookup(recordTag(tag), now.UnixNano())
	if ne == nil {
		return record{}, false
	}
	return recordOf(ne.e)
}

// tagState checks refs, a value's tags, against their records now: in
// the near cache, and, for those it does not hold, on the server (reads
// that fill the near cache). A near-cached value whose record the near
// cache dropped (an invalidation) so costs one round trip, for the
// record alone: the value is current, as its own copy is. A record the
// server failed to answer for is unverified: the value is not served on
// a guess, nor deleted on one (a failed read is a fact about that read,
// not about the record).
func (c *Cache) tagState(ctx context.Context, refs []codec.TagRef) tagState {
	st := tagsCurrent
	var missing []int
	now := coarseNow()
	for i, ref := range refs {
		if r, ok := c.nearRecord(ref.Name, now); ok {
			st = max(st, r.against(ref))
			continue
		}
		missing = append(missing, i)
	}
	if len(missing) == 0 || st == tagsHard {
		return st
	}
	got := make([]tagState, len(missing))
	readOne := func(j int) {
		ref := refs[missing[j]]
		rd := c.read(ctx, c.recordKeys(ref.Name))
		if rd.err != nil && !redisx.IsNil(rd.err) {
			if !redisx.CallerDone(ctx) {
				c.serverError(ref.Name, rd.err)
			}
			got[j] = tagsUnverified
			return
		}
		r, ok := decodeRecord(rd.raw)
		if !ok {
			got[j] = tagsHard // gone, or something else under its key
			return
		}
		got[j] = r.against(ref)
	}
	if len(missing) == 1 {
		readOne(0)
	} else {
		var wg sync.WaitGroup
		for j := range missing {
			wg.Go(func() { readOne(j) })
		}
		wg.Wait()
	}
	for _, s := range got {
		st = max(st, s)
	}
	return st
}

// withTags updates rd, a reading of an entry, to what its tags' records
// say now: a value or not-found of an invalidated tag is to be replaced
// (rd.purged: the caller deletes it and loads, see dropInvalidated); a
// value of a softly invalidated tag is stale, and refreshed; one whose
// records could not be read is not served, and is replaced as a value
// nobody can use is (rd.unverified: under the rebuild lock, the write
// conditional on it), never deleted.
//
// An untagged entry (most) costs one length check: this part is inlined.
func (c *Cache) withTags(ctx context.Context, rd *reading) {
	if rd.e != nil && len(rd.e.Tags) > 0 {
		c.judgeTags(ctx, rd)
	}
}

// judgeTags is withTags for a tagged entry.
func (c *Cache) judgeTags(ctx context.Context, rd *reading) {
	if rd.use != useValue && rd.use != useNotFound {
		return
	}
	switch c.tagState(ctx, rd.e.Tags) {
	case tagsHard:
		*rd = reading{use: useReplace, e: rd.e, stale: true, purged: true}
	case tagsUnverified:
		*rd = reading{use: useReplace, e: rd.e, stale: true, unverified: true}
	case tagsSoft:
		if rd.use == useNotFound {
			*rd = reading{use: useReplace, e: rd.e, stale: true}
			break
		}
		rd.stale, rd.refresh = true, true
	}
}

// dropInvalidated deletes raw, an entry a tag invalidated, from k if k
// still holds it: the key is then a miss like any other (one claim in the
// cluster, one load, the others waiting), which GetOrLoadMany loads in
// its batch. deleted is false when k changed meanwhile: read it again.
func (c *Cache) dropInvalidated(ctx context.Context, k keys, raw []byte) (deleted bool, err error) {
	deleted, err = c.conn.DeleteIfEqual(ctx, k.value, string(raw))
	c.nearDrop(k)
	return deleted, err
}

// tagRefs returns the epochs of tags' records now, for a value about to
// be loaded or set: from the near cache, or in one round trip that makes
// the records missing (SET NX GET: the record made, or the one there).
func (c *Cache) tagRefs(ctx context.Context, tags []string) ([]codec.TagRef, error) {
	if len(tags) == 0 {
		return nil, nil
	}
	refs := make([]codec.TagRef, len(tags))
	var missing []int
	now := coarseNow()
	for i, t := range tags {
		refs[i].Name = t
		if r, ok := c.nearRecord(t, now); ok {
			refs[i].Hard, refs[i].Soft = r.hard, r.soft
			continue
		}
		missing = append(missing, i)
	}
	if len(missing) == 0 {
		return refs, nil
	}
	pipe := c.rc.Pipeline()
	made := make([]record, len(missing))
	cmds := make([]*redis.StatusCmd, len(missing))
	for j, i := range missing {
		made[j] = record{hard: newEpoch(), soft: newEpoch()}
		cmds[j] = pipe.SetArgs(ctx, c.recordKeys(tags[i]).value, c.recordBytes(made[j], c.s.tagLife),
			redis.SetArgs{Mode: "NX", TTL: c.s.tagLife, Get: true})
	}
	_ = redisx.Exec(ctx, pipe) // a failed pipeline's error is on every command
	for j, i := range missing {
		old, err := cmds[j].Result()
		switch {
		case redisx.IsNil(err):
			refs[i].Hard, refs[i].Soft = made[j].hard, made[j].soft
		case err != nil:
			return nil, fmt.Errorf("cache: tag %q: %w", tags[i], redisx.Denied("tag", err, ""))
		default:
			r, ok := decodeRecord([]byte(old))
			if !ok {
				return nil, fmt.Errorf("cache: tag %q: its record %q holds something else", tags[i], c.recordKeys(tags[i]).value)
			}
			refs[i].Hard, refs[i].Soft = r.hard, r.soft
		}
	}
	return refs, nil
}

// loadTags is tagRefs for a load about to run: a failure is counted and
// logged, and the value is stored with epochs that match no record, so
// that no reader serves it (the load's callers get it).
func (c *Cache) loadTags(ctx context.Context, k keys, tags []string) []codec.TagRef {
	refs, err := c.tagRefs(ctx, tags)
	if err == nil {
		return refs
	}
	if !redisx.CallerDone(ctx) {
		c.serverError(k.user, err)
	}
	refs = make([]codec.TagRef, len(tags))
	for i, t := range tags {
		refs[i].Name = t
	}
	return refs
}

// validTag says what is wrong with tag, or "".
func validTag(tag string) string {
	switch {
	case tag == "":
		return "an empty tag"
	case len(tag) > maxTagLen:
		return fmt.Sprintf("a tag of %d bytes, more than %d", len(tag), maxTagLen)
	}
	return ""
}

// checkTags checks the tags of a call: what's wrong, or "".
func checkTags(tags []string) string {
	if len(tags) > maxTags {
		return fmt.Sprintf("%d tags, more than %d", len(tags), maxTags)
	}
	for _, t := range tags {
		if why := validTag(t); why != "" {
			return why
		}
	}
	return ""
}

//go:embed softtag.lua
var softTagSrc string

// softTag draws a record's soft epoch anew, keeping its hard one and its
// expiry. A record that is not there stays so: the values that name it
// read it as invalidated already.
var softTag = redis.NewScript(softTagSrc)

// InvalidateTag invalidates every value stored with one of tags (see
// WithTags), in every process, near caches included: from its return on
// (in other processes with near caches: once the record's invalidation
// reaches them, within the near cache's coherence bound, as for any
// write), no call is answered with one of them, and a load that was
// running meanwhile is not served by any later call. Each tag costs one write,
// however many values it has: the tags' writes go in one pipeline, one
// round trip (on a Cluster, one per node holding a tag's record). The
// values themselves stay on the server until a call for one of them finds
// it invalidated and loads it again (one load in the cluster, the
// callers waiting for it, as on a miss), or they expire. It returns an
// error naming each tag it could not invalidate; the others stand.
func (c *Cache) InvalidateTag(ctx context.Context, tags ...string) error {
	return c.invalidateTags(ctx, "InvalidateTag", tags, func(pipe redis.Pipeliner, k keys, _ bool) redis.Cmder {
		return pipe.Set(ctx, k.value, c.recordBytes(record{hard: newEpoch(), soft: newEpoch()}, c.s.tagLife), c.s.tagLife)
	})
}

// SoftInvalidateTag marks every value stored with one of tags stale, in
// every process, near caches included: from its return on (in this
// process and without near caches; in other processes with near caches,
// once the record's invalidation reaches them, within the near cache's
// coherence bound), each is served as a stale value is (see
// ExpiryPolicy.Stale), whatever its freshness, while one background
// refresh in the cluster replaces it (with loads that began before the
// call being no replacement). A value without a stale window is served
// stale too, until the server drops it. Like InvalidateTag it costs one
// write per tag in one round trip: a script (EVALSHA, EVAL the first time
// a server meets it), which needs no read before the write. A tag whose
// record is gone has nothing to mark: its values read as invalidated
// already.
func (c *Cache) SoftInvalidateTag(ctx context.Context, tags ...string) error {
	return c.invalidateTags(ctx, "SoftInvalidateTag", tags, func(pipe redis.Pipeliner, k keys, whole bool) redis.Cmder {
		var soft [8]byte
		binary.BigEndian.PutUint64(soft[:], newEpoch())
		if whole {
			return softTag.Eval(ctx, pipe, []string{k.value}, string(soft[:]))
		}
		return softTag.EvalSha(ctx, pipe, []string{k.value}, string(soft[:]))
	})
}

// invalidateTags writes each of tags' records with write, in one pipeline
// (op names the call in errors). A script the server does not know
// (NOSCRIPT: it restarted, or never ran it) is sent whole once more
// (whole: EVAL, which also teaches it the script), not loaded first: a
// first call costs two round trips, not three.
func (c *Cache) invalidateTags(ctx context.Context, op string, tags []string, write func(pipe redis.Pipeliner, k keys, whole bool) redis.Cmder) error {
	if c == nil {
		return invalid("nil *Cache")
	}
	for _, t := range tags {
		if why := validTag(t); why != "" {
			return invalid("%s: %s", op, why)
		}
	}
	if c.isClosed() {
		return ErrClosed
	}
	var cmds []redis.Cmder
	for attempt := 0; ; attempt++ {
		pipe := c.rc.Pipeline()
		cmds = cmds[:0]
		for _, t := range tags {
			cmds = append(cmds, write(pipe, c.recordKeys(t), attempt > 0))
		}
		_ = redisx.Exec(ctx, pipe) // a failed pipeline's error is on every command
		if attempt > 0 || !slices.ContainsFunc(cmds, noScript) {
			break
		}
	}
	errs := make([]error, len(tags))
	for i, t := range tags {
		c.nearDrop(c.recordKeys(t)) // read-your-writes in this process, also after a failure
		if err := cmds[i].Err(); err != nil && !redisx.IsNil(err) {
			errs[i] = c.writeFailed(ctx, "invalidate tag", t, err)
		}
	}
	return errors.Join(errs...)
}

// noScript reports whether cmd failed as the server did not know its
// script.
func noScript(cmd redis.Cmder) bool {
	err := cmd.Err()
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}
