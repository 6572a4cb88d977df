package cache

import "time"

// The results that travel inside a GetOrLoad: outcome (cache.go) is what a
// flight hands to every caller in it; verdict is what one read of the key
// decided for the flight's loop (fill).

// next is what fill does after one read of the key.
type next uint8

const (
	// answered: the verdict's res and err are the flight's result.
	answered next = iota
	// readAgain: read the key again at once. The key changed between the
	// read and the lock, or another caller claimed the key first (the
	// next read finds its claim, or its value).
	readAgain
	// keyFree: nothing is stored under the key; claim it (see
	// Cache.claimAfter).
	keyFree
	// replaceOld: what is stored (old) cannot be served; take the rebuild
	// lock and replace it (see Cache.claimAfter).
	replaceOld
	// waitRebuild: another process is rebuilding the key; wait for its
	// announcement, or for the poll interval, then read again.
	waitRebuild
)

// verdict is what one read of the key decided (see Cache.step).
//
// Invariant: res and err are set only when next is answered; claim only
// when next is waitRebuild; old only when next is replaceOld; seen for
// both.
type verdict struct {
	next next
	res  outcome
	err  error

	// claim is the token of the rebuild's claim on the value key, or of
	// the rebuild lock it holds beside a value that must be replaced;
	// "" when the holder could not be told (then no announcement can be
	// matched to what this caller read, and any notice or poll sends it
	// back to reading the key).
	claim string
	// replace says that claim is the rebuild lock held beside bytes the
	// caller could not use, not a claim on the value key: that rebuild's
	// write may have replaced other bytes (see seenClaim.replace).
	replace bool
	// old is the stored value to replace.
	old []byte
	// seen is when the read that found the claim (or old) was sent: the
	// outcome of that rebuild is at least that new (see outcome.accepts).
	seen time.Time
	// told: an answer that Cache.heard gave, which emitted the wait's
	// EventWait already.
	told bool
}

// answer is the verdict that ends the flight with res and err.
func answer(res outcome, err error) verdict {
	return verdict{next: answered, res: res, err: err}
}

// told is answer from Cache.heard, which emitted the wait's EventWait.
func told(res outcome, err error) verdict {
	v := answer(res, err)
	v.told = true
	return v
}

// waitFor is the verdict to wait for the rebuild whose claim (token claim,
// or "" for the rebuild lock) a read sent at seen found.
func waitFor(claim string, seen time.Time) verdict {
	return verdict{next: waitRebuild, claim: claim, seen: seen}
}

// waitForReplace is waitFor the rebuild holding the rebuild lock (token
// claim) beside bytes that a read sent at seen could not use.
func waitForReplace(claim string, seen time.Time) verdict {
	return verdict{next: waitRebuild, claim: claim, replace: true, seen: seen}
}
