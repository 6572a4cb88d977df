package cache

import (
	"context"
	"log/slog"
	"strings"

	"github.com/hotkv/stampede/internal/redisx"
	"github.com/hotkv/stampede/lock"
)

// Capabilities returns what the cache found its server to offer and the
// strategies in use (see lock.Capabilities), probing the server on the
// first call (on a key in the Namespace), together with what it found of its announcement channels:
// AnnounceDenied is the server's refusal of (S)SUBSCRIBE or (S)PUBLISH on them,
// empty while both work (or have not been refused yet). It is safe for
// concurrent use.
func (c *Cache) Capabilities(ctx context.Context) (lock.Capabilities, error) {
	// Probe (if nobody has yet) on a key in the namespace, which the
	// user may access.
	caps, err := c.conn.CapabilitiesFor(ctx, c.s.ns+":{probe}")
	if err != nil {
		return redisx.Mirror[lock.Capabilities](caps), err
	}
	caps.AnnounceDenied = c.ann.refusal()
	caps.NearDenied = c.track.refusal()
	return redisx.Mirror[lock.Capabilities](caps), nil
}

// announceRefused is told by the announcer of each refusal of the
// announcement channels: it counts it and, the first time since the
// command last worked, warns, naming the channels and what to grant.
func (c *Cache) announceRefused(op string, err error, first bool) {
	c.n.announceDenied.Add(1)
	c.tell(Event{Kind: EventServerError, Err: err}) // counted in AnnounceDenied, not ServerErrors
	if first {
		channel, grant := c.announceChannels()
		c.log(slog.LevelWarn, "announcement channel refused by the server; processes waiting for a rebuild will poll every PollInterval instead of being told",
			"channel", channel, "command", op, "err", err,
			"fix", "grant the user "+grant+" and +"+strings.ToLower(op))
	}
}

// announceChannels names the announcement channels, and the ACL channel
// rule that grants them.
func (c *Cache) announceChannels() (channel, grant string) {
	if c.s.broadcast {
		return c.s.ns + ":announce", "&" + c.s.ns + ":announce"
	}
	return c.s.ns + ":{K}:ann (one per key)", "&" + c.s.ns + ":*"
}

// announceRestored is told when a refused command on the channel works
// again.
func (c *Cache) announceRestored(op string) {
	channel, _ := c.announceChannels()
	c.log(slog.LevelInfo, "announcement channel works again", "channel", channel, "command", op)
}

// permitted returns ErrPermission (a *redisx.PermissionError) when a
// rebuild of k could not be finished on this server for want of a script
// the server refuses: the claim could not be replaced by the value, kept
// alive, or released. old is the value the rebuild would replace (nil for
// a claim on an absent key). Checking before claiming leaves nothing
// behind that would block other processes.
func (c *Cache) permitted(ctx context.Context, k keys, old []byte) error {
	const claim = 64 // about the length of a lock value without metadata
	if err := c.conn.Check(ctx, k.value, redisx.OpRelease, claim); err != nil {
		return err
	}
	if err := c.conn.Check(ctx, k.value, redisx.OpExtend, claim); err != nil {
		return err
	}
	n := claim
	if old != nil {
		n = len(old)
	}
	return c.conn.Check(ctx, k.value, redisx.OpSet, n)
}

// remotePermission is ErrRemoteLoad for a rebuild whose write the ACL
// refused; it matches ErrPermission too.
type remotePermission struct{ error }

func (e remotePermission) Is(target error) bool { return target == ErrPermission }
func (e remotePermission) Unwrap() error        { return e.error }
