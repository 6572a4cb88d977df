package middleware

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/engine"
	"github.com/hotkv/stampede/internal/failpoint"
)

// This file holds purging by tag (Options.Tags, PurgeTag).
//
// A purge touches one small record per tag, never the pages: each tag has
// a record in the cache (its stamp: a random epoch, drawn anew by each
// purge, and when that purge was), and each stored page names the epoch
// of each of its tags that its render saw. A page whose tag has another
// epoch now, or none (the record expired or was evicted), was purged: a
// request that finds it renders it again, knowing the epochs now, and
// stores that render in its place, if it is still there (replacePurged);
// every other request for it, in every process, waits for that one
// render. So a purge costs the same for a
// tag of ten pages and of ten million, and the server holds no set of
// pages for any tag. The records are cache entries: with the near cache
// on, the check costs no round trip, and a purge reaches every process's
// copy by the server's invalidation, as any write does.
//
// A render that was running when its tag was purged may have read the
// data from before the purge: it must not be stored. The render sees the
// record after it ran; its page is stored only if the epoch is the one
// known before the render began (the page it replaces, a stale one it
// refreshes or a purged one it renders again, named it), or, for a tag
// no page named before, if the render began after the last purge by more
// than ClockSkew. Otherwise the response goes to its own client only, and
// the cache's load renders once more (see retryPurged), now knowing the
// epoch: the waiters get that render.

// Bounds of a page's tags.
const (
	maxTags   = 128
	maxTagLen = 1024
)

// tagKeyPrefix begins the cache key of every tag's record. Page keys
// begin with a method ("GET "), and a Keys.Func key that begins so
// bypasses the cache, so the two never meet.
const tagKeyPrefix = "tag\n"

// tagKey is the cache key of tag's record.
func tagKey(tag string) string { return tagKeyPrefix + tag }

// validTag says what is wrong with tag as a tag, or "".
func validTag(tag string) string {
	switch {
	case tag == "":
		return "an empty tag"
	case len(tag) > maxTagLen:
		return fmt.Sprintf("a tag of %d bytes, more than %d", len(tag), maxTagLen)
	case strings.ContainsFunc(tag, func(r rune) bool { return r < 0x20 || r == 0x7f || r == ' ' || r == ',' }):
		return fmt.Sprintf("tag %q holds a space, a comma or a control character", tag)
	}
	return ""
}

// tagSeparators returns what separates the tags in the field name
// (canonical).
func tagSeparators(name string) func(rune) bool {
	switch name {
	case "Surrogate-Key", "Xkey":
		return func(r rune) bool { return r == ' ' || r == '\t' }
	case "Cache-Tag":
		return func(r rune) bool { return r == ',' }
	}
	return func(r rune) bool { return r == ' ' || r == '\t' || r == ',' }
}

// parseTags returns the tags that the fields names (canonical) of h list,
// each once, in the order they come, or why the page may not be stored:
// too many, too long, or malformed.
func parseTags(h http.Header, names []string) (tags []string, reason string) {
	for _, name := range names {
		sep := tagSeparators(name)
		for _, line := range h[name] {
			for _, t := range strings.FieldsFunc(line, sep) {
				if t = strings.Trim(t, " \t"); t == "" {
					continue
				}
				if why := validTag(t); why != "" {
					return nil, "tags: " + why
				}
				if !slices.Contains(tags, t) {
					if len(tags) == maxTags {
						return nil, fmt.Sprintf("tags: more than %d", maxTags)
					}
					tags = append(tags, t)
				}
			}
		}
	}
	return tags, ""
}

// PurgeTag removes every page tagged with one of tags (see Options.Tags),
// every Vary variant included, in every process, near caches included:
// from its return on, no request is answered with one of them, and a
// render that was running meanwhile is not stored. Each tag costs one
// write, however many pages it has; the pages themselves are deleted by
// the first request for each, which renders it again (one render in the
// cluster), or expire unread. It returns an error naming each tag it
// could not purge; those purged before it stand.
func (m *Middleware) PurgeTag(ctx context.Context, tags ...string) error {
	for _, t := range tags {
		if why := validTag(t); why != "" {
			return invalid("PurgeTag: %s", why)
		}
	}
	var errs []error
	now := m.now().UnixMilli()
	failpoint.Inject(ctx, failpoint.MiddlewarePurge)
	for _, t := range tags {
		st := tagStamp{Epoch: rand.Uint64(), PurgedAt: now, Soft: rand.Uint64(), SoftAt: now} // both: see SoftPurgeTag
		if err := cache.Set(ctx, m.c, tagKey(t), st, cache.WithExpiry(cache.Expiry{Fresh: m.tagLife})); err != nil {
			errs = append(errs, fmt.Errorf("middleware: purge tag %q: %w", t, err))
		}
	}
	return errors.Join(errs...)
}

// eachTag runs f for each of n tags: one after another when the near
// cache answers (each is a lookup in memory), concurrently otherwise
// (each is a read that needs a round trip).
func (m *Middleware) eachTag(n int, f func(i int)) {
	if n == 1 || m.c.NearActive() {
		for i := range n {
			f(i)
		}
		return
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { f(i) })
	}
	wg.Wait()
}

// tagState is what the records of a page's tags say of it.
type tagState uint8

const (
	tagsLive   tagState = iota // no tag of the page was purged since its render
	tagsSoft                   // soft-purged only: a soft epoch differs, every hard one matches (see softpurge.go)
	tagsPurged                 // purged: a hard epoch differs, or a record is gone or cannot be read
)

// tagsState says whether a tag of resp was purged, or soft-purged, since
// its render; when one was, it returns the records' epochs now, for the
// render that replaces or refreshes the page (see registerTags): a tag
// without a record is left out. A record that cannot be read counts as
// purged. A page stored before soft purges (its Soft 0) whose tag was
// soft-purged since the record was made reads as soft-purged: it may
// predate that soft purge.
func (m *Middleware) tagsState(ctx context.Context, resp *response) (state tagState, now []tagRef) {
	if len(resp.Tags) == 0 {
		return tagsLive, nil
	}
	var one [1]tagStamp
	var oneOK [1]bool
	got, ok := one[:], oneOK[:]
	if len(resp.Tags) > 1 {
		got, ok = make([]tagStamp, len(resp.Tags)), make([]bool, len(resp.Tags))
	}
	m.eachTag(len(resp.Tags), func(i int) {
		st, _, err := engine.Peek[tagStamp](ctx, m.e, tagKey(resp.Tags[i].Name))
		got[i], ok[i] = st, err == nil || errors.Is(err, cache.ErrStale)
	})
	for i := range got {
		switch {
		case !ok[i] || got[i].Epoch != resp.Tags[i].Epoch:
			state = tagsPurged
		case got[i].Soft != resp.Tags[i].Soft && state == tagsLive:
			state = tagsSoft
		}
	}
	if state == tagsLive {
		return tagsLive, nil
	}
	for i := range got {
		if ok[i] {
			now = append(now, tagRef{Name: resp.Tags[i].Name, Epoch: got[i].Epoch, Soft: got[i].Soft})
		}
	}
	return state, now
}

// live reports whether no tag of resp was purged since its render; a
// soft purge leaves it live (it is served stale, see softpurge.go).
func (m *Middleware) live(ctx context.Context, resp *response) bool {
	st, _ := m.tagsState(ctx, resp)
	return st != tagsPurged
}

// registerTags returns the tags of a render of tags (the names), begun
// at requested, with the epochs of their records, making the records
// that do not exist yet (to live as recordLife says for a page kept for
// life); seen are the epochs known before the render began (see the
// comment at the top of this file). reason says why the render may not
// be stored: a record could not be read or made, or (with purged set) a
// purge may have overtaken the render.
func (m *Middleware) registerTags(ctx context.Context, tags []string, requested time.Time, seen []tagRef, life time.Duration) (refs []tagRef, reason string, purged bool) {
	type got struct {
		st   tagStamp
		err  error
		lost bool // no record was found
	}
	gots := make([]got, len(tags))
	m.eachTag(len(tags), func(i int) {
		key := tagKey(tags[i])
		st, _, err := engine.Peek[tagStamp](ctx, m.e, key)
		lost := errors.Is(err, cache.ErrMiss)
		if lost {
			// The first page of the tag (or the first since its record
			// ended): make it. A purge at the same time wins (a Set
			// overtakes a load), and is then what this reads.
			st, err = cache.GetOrLoad(ctx, m.c, key, func(context.Context) (tagStamp, error) {
				return tagStamp{Epoch: rand.Uint64()}, nil
			}, cache.WithExpiry(cache.Expiry{Fresh: m.recordLife(life)}))
		}
		gots[i] = got{st, err, lost}
	})
	refs = make([]tagRef, len(tags))
	began := requested.UnixMilli()
	for i, g := range gots {
		if g.err != nil && !errors.Is(g.err, cache.ErrStale) {
			return nil, "tags: the record of " + fmt.Sprintf("%q", tags[i]) + " is unavailable: " + g.err.Error(), false
		}
		refs[i] = tagRef{Name: tags[i], Epoch: g.st.Epoch, Soft: g.st.Soft}
	}

	for i, ref := range refs {
		known := epochOf(seen, ref.Name)
		if known == ref.Epoch {
			continue // no purge since before the render
		}
		if known != 0 && gots[i].lost {
			// The record known before the render is gone: it expired or
			// was evicted, or a failover lost it, maybe with a purge
			// during the render. Purged at a time nobody knows.
			return refs, "tags: the record of " + fmt.Sprintf("%q", ref.Name) + " was lost during the render", true
		}
		if st := gots[i].st; st.PurgedAt != 0 && began <= st.PurgedAt+m.tagSkew.Milliseconds() {
			return refs, "tags: " + fmt.Sprintf("%q", ref.Name) + " was purged during the render", true
		}
	}
	for i := range refs {
		// A soft purge the render may have begun before (within
		// ClockSkew of its start) is not seen: the page records the soft
		// epoch known before the render, and is stored stale at once.
		// (A render again after a purge, above, gets the epochs as they
		// are: it begins after them.)
		st, known := gots[i].st, softOf(seen, refs[i].Name)
		if st.Soft != known && st.SoftAt != 0 && began <= st.SoftAt+m.tagSkew.Milliseconds() {
			refs[i].Soft = known
		}
	}
	return refs, "", false
}

// recordLife is how long a tag record made by a render of a page kept
// for life lives: twice that, at least a minute, at most Tags.Lifetime.
// A page rendered later under the same tag may outlive the record: it
// then renders once more, as after a purge.
func (m *Middleware) recordLife(life time.Duration) time.Duration {
	if life >= m.tagLife/2 {
		return m.tagLife
	}
	return min(m.tagLife, max(2*life, time.Minute))
}

func epochOf(refs []tagRef, name string) uint64 {
	for _, r := range refs {
		if r.Name == name {
			return r.Epoch
		}
	}
	return 0 // no record's: records draw a random epoch, 0 with probability 2^-64
}

// softOf is epochOf for the soft epoch: 0 for a tag refs does not name.
func softOf(refs []tagRef, name string) uint64 {
	for _, r := range refs {
		if r.Name == name {
			return r.Soft
		}
	}
	return 0
}

// tagNames returns the names of refs.
func tagNames(refs []tagRef) []string {
	names := make([]string, len(refs))
	for i, r := range refs {
		names[i] = r.Name
	}
	return names
}

// dropPurged deletes p, found under key with a purged tag, if key still
// holds it (another process may have rendered it again meanwhile).
func (m *Middleware) dropPurged(ctx context.Context, key string, p *peeked) {
	err := m.e.DeleteIfUnchanged(ctx, key, p.found.Raw)
	if err != nil && !errors.Is(err, engine.ErrChanged) && m.o.Logger != nil {
		m.o.Logger.Warn("middleware: delete of a purged page failed", "err", err)
	}
}

// tagStripper removes the tag fields (Options.Tags.Headers, canonical)
// from the response header before it goes out, whatever writes it: a
// hit, a render streaming through, or a bypass.
type tagStripper struct {
	http.ResponseWriter
	names []string
	done  bool
}

func (ts *tagStripper) strip() {
	if ts.done {
		return
	}
	h := ts.ResponseWriter.Header()
	for _, n := range ts.names {
		delete(h, n)
	}
	for k := range h { // set in another letter case than the canonical
		if ck := http.CanonicalHeaderKey(k); ck != k && slices.Contains(ts.names, ck) {
			delete(h, k)
		}
	}
}

func (ts *tagStripper) WriteHeader(code int) {
	ts.strip()
	if code >= 200 || code == http.StatusSwitchingProtocols {
		ts.done = true // a 1xx goes out with the fields set then; the final one strips again
	}
	ts.ResponseWriter.WriteHeader(code)
}

func (ts *tagStripper) Write(p []byte) (int, error) {
	ts.strip()
	ts.done = true
	return ts.ResponseWriter.Write(p)
}

// ReadFrom keeps the ResponseWriter's own, for io.Copy (see statusWriter).
func (ts *tagStripper) ReadFrom(src io.Reader) (int64, error) {
	ts.strip()
	ts.done = true
	if rf, ok := ts.ResponseWriter.(io.ReaderFrom); ok {
		return rf.ReadFrom(src)
	}
	return io.Copy(struct{ io.Writer }{ts.ResponseWriter}, src)
}

// Flush sends the header (200 if none was written), stripped, and flushes.
func (ts *tagStripper) Flush() {
	ts.strip()
	ts.done = true
	_ = http.NewResponseController(ts.ResponseWriter).Flush()
}

// Hijack hands the connection to the handler.
func (ts *tagStripper) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	ts.done = true
	return http.NewResponseController(ts.ResponseWriter).Hijack()
}

// Unwrap lets http.ResponseController reach the real writer.
func (ts *tagStripper) Unwrap() http.ResponseWriter { return ts.ResponseWriter }
