package cache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hotkv/stampede/internal/codec"
	"github.com/hotkv/stampede/internal/lockvalue"
	"github.com/hotkv/stampede/internal/redisx"
	"github.com/hotkv/stampede/lock"
)

// The backend cap (Options.Backends): a load for a capped backend takes a
// permit of the backend's lock.Semaphore once it holds its key's claim (or
// rebuild lock, or a batch's claims), while the claim is kept alive, and
// before its loader runs; the permit is kept alive while the loader runs
// and given back as soon as it returns, before the write. So the claim
// protocol is the same with or without a cap: the permit only delays the
// loader, and a load that gets none ends as a failed load does (its
// claim freed, its error announced to the waiters of every process).
//
// The semaphore is one key per backend in the namespace, backendKey, with
// LockTTL as the permits' TTL: a process killed while loading frees its
// permit when its claim expires too.

// backendKey is the key of the semaphore of the backend name in namespace
// ns: "NS:{backend <tag>}". The space keeps it apart from every value key
// "NS:{K}": a K holding a space is hashed (redisx.Tag), and a hash has
// none.
func backendKey(ns, name string) string { return ns + ":{backend " + redisx.Tag(name) + "}" }

// newBackends makes the semaphores of s's backends on locks.
func newBackends(locks *lock.Client, s settings) (map[string]*lock.Semaphore, error) {
	if len(s.backends) == 0 {
		return nil, nil
	}
	sems := make(map[string]*lock.Semaphore, len(s.backends))
	for name, n := range s.backends {
		sem, err := locks.Semaphore(backendKey(s.ns, name), n, s.lockTTL, lock.WithPollInterval(s.poll))
		if err != nil {
			return nil, fmt.Errorf("cache: Backends[%q]: %w", name, err)
		}
		sems[name] = sem
	}
	return sems, nil
}

// permit takes a permit of it's backend for the load of the keys ks (by
// value key; users names them in errors), waiting at most it.wait, and
// keeps it alive until done is called, which gives it back. A load not
// capped gets a done that does nothing. waited reports that every permit
// was held at first: a rebuild beside a stored value then checks that the
// value is still the one it replaces (see rebuilt), since another process
// may have loaded the key meanwhile.
//
// A load that finds no permit free within it.wait, or whose ctx ends
// while it waits, gets ErrBackendBusy; a refusal by the server (its ACL)
// is its error too. A server that fails otherwise lets the load run
// without a permit (as a load fails open without the server), with a
// warning: the claim it holds says the server answered a moment ago.
func (c *Cache) permit(ctx context.Context, it itemSettings, ks []keys) (done func(), waited bool, err error) {
	sem := c.sems[it.backend]
	if sem == nil || len(ks) == 0 {
		return func() {}, false, nil
	}
	start := time.Now()
	p, err := sem.TryAcquire(ctx)
	if errors.Is(err, lock.ErrNotObtained) && ctx.Err() == nil {
		waited = true
		c.n.backendWaits.Add(1)
		for _, k := range ks {
			c.busy.Store(k.value, it.backend)
		}
		wctx, cancel := context.WithTimeout(ctx, it.wait)
		p, err = sem.Acquire(wctx)
		cancel()
		for _, k := range ks {
			c.busy.Delete(k.value)
		}
	}
	switch {
	case err == nil:
	case errors.Is(err, lock.ErrNotObtained):
		return nil, waited, c.busyErr(it.backend, ks, time.Since(start), err)
	case redisx.IsReply(err) || errors.Is(err, ErrPermission):
		return nil, waited, fmt.Errorf("cache: load %q: backend %q: %w", ks[0].user, it.backend, err)
	default:
		c.serverError(ks[0].user, err)
		return func() {}, waited, nil
	}
	_, stop := p.KeepAlive(ctx, c.s.lockTTL, 0)
	return func() {
		_ = stop() // a permit lost meanwhile is only a permit: the load is done
		rctx, cancel := writeContext(ctx)
		defer cancel()
		if err := p.Release(rctx); err != nil && !errors.Is(err, lock.ErrNotHeld) {
			c.serverError(ks[0].user, err)
		}
	}, waited, nil
}

// errRebuilt ends a load that waited for a permit and found its key
// changed meanwhile: the value a refresh or a replacement began from is
// gone (another process loaded the key, or a Set or Delete came), or a
// miss's claim is (a Set or Delete ended it). Its loader does not run. (It wraps context.Canceled so that a fail-open
// load that joined the run runs again, as when a run's callers left.)
var errRebuilt = fmt.Errorf("cache: the value changed while its rebuild waited for a backend permit: %w", context.Canceled)

// rebuilt reports whether k no longer holds what the rebuild holding l
// began from, as far as a read now says (a failed read is no evidence:
// false): old, for a rebuild beside a stored value, or l itself, for a
// claim on the value key (a Delete or Set ended it).
func (c *Cache) rebuilt(ctx context.Context, k keys, l *lock.Lock, old []byte) bool {
	cur, err := c.rc.Get(ctx, k.value).Bytes()
	switch {
	case redisx.IsNil(err):
		return true
	case err != nil:
		return false
	case old != nil:
		return !bytes.Equal(cur, old)
	}
	v, ok := lockvalue.Decode(string(cur))
	return !ok || codec.IsEntry(cur) || v.Token != l.Token() // as claim tells them apart
}

// busyErr is the error of a load of ks that waited d for a permit of the
// backend in vain (cause: the semaphore's error, which says whether the
// wait ran out or the load's context ended).
func (c *Cache) busyErr(backend string, ks []keys, d time.Duration, cause error) error {
	what := fmt.Sprintf("%q", ks[0].user)
	if len(ks) > 1 {
		what = fmt.Sprintf("%d keys", len(ks))
	}
	return fmt.Errorf("%w: load %s: backend %q (cap %d) had no permit free after %v: %w",
		ErrBackendBusy, what, backend, c.sems[backend].Limit(), d.Round(time.Millisecond), cause)
}

// busyCaller is the error of a caller of k whose own ctx ended (err) while
// the load it waited for waited for a permit of a backend: ErrBackendBusy
// with err, naming the backend, rather than err alone. Other errors are
// returned as they are.
func (c *Cache) busyCaller(ctx context.Context, k keys, err error) error {
	if !redisx.CallerDone(ctx) {
		return err
	}
	if b, ok := c.busy.Load(k.value); ok {
		return fmt.Errorf("%w: load %q: backend %q had no permit free before the call's context ended: %w", ErrBackendBusy, k.user, b, err)
	}
	return err
}
