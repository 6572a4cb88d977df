package redistest

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Subscribe subscribes to channel on rc (SSUBSCRIBE when sharded, else
// SUBSCRIBE) and returns once the server confirmed it, so that nothing
// published after it returns is missed; next returns the payload of the
// next message, failing tb if ctx ends first. The subscription ends with
// the test.
func Subscribe(tb testing.TB, ctx context.Context, rc redis.UniversalClient, channel string, sharded bool) (next func() string) {
	tb.Helper()
	var ps *redis.PubSub
	if sharded {
		ps = rc.SSubscribe(ctx, channel)
	} else {
		ps = rc.Subscribe(ctx, channel)
	}
	tb.Cleanup(func() { _ = ps.Close() })
	if _, err := ps.Receive(ctx); err != nil {
		tb.Fatalf("subscribing to %s: %v", channel, err)
	}
	return func() string {
		tb.Helper()
		m, err := ps.ReceiveMessage(ctx)
		if err != nil {
			tb.Fatalf("receiving on %s: %v", channel, err)
		}
		return m.Payload
	}
}
