package nemesis

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed busy.lua
var busyLua string

var busyScript = redis.NewScript(busyLua)

// busyThreshold is the busy-reply-threshold during the busy fault: how
// long the script runs before other clients are answered BUSY.
const busyThreshold = "10" // milliseconds

func (r *run) busy(ctx context.Context) error {
	old, err := configGet(ctx, r.admin, "busy-reply-threshold")
	if err != nil {
		return fmt.Errorf("nemesis: busy: %w", err)
	}
	r.rec.Start = time.Now()
	if err := configSet(ctx, r.admin, "busy-reply-threshold", busyThreshold); err != nil {
		return fmt.Errorf("nemesis: busy: %w", err)
	}
	r.rec.Detail = fmt.Sprintf("looping script, busy-reply-threshold %s ms (was %s)", busyThreshold, old["busy-reply-threshold"])

	// The script's connection waits for as long as the script runs; it is
	// ended by SCRIPT KILL, not by ctx, and closing the client is the last
	// resort if that fails.
	looper := redis.NewClient(&redis.Options{Addr: r.addr, ReadTimeout: -1, MaxRetries: -1, PoolSize: 1, DisableIdentity: true})
	defer func() { _ = looper.Close() }()
	script := goCall(func() error { return busyScript.Run(context.WithoutCancel(ctx), looper, nil).Err() })

	began := waitReply(ctx, r.admin, "BUSY", script)
	if began != nil {
		began = fmt.Errorf("nemesis: busy: %w", began)
	}
	var cut error
	if began == nil {
		cut = hold(ctx, r.d, script.done)
	}
	rctx, cancel := r.restoreCtx(ctx)
	defer cancel()
	restore := killScript(rctx, r.admin, script)
	restore = errors.Join(restore, configSet(rctx, r.admin, "busy-reply-threshold", old["busy-reply-threshold"]))
	return errors.Join(began, cut, restoreErr(Busy, restore))
}

// killScript sends SCRIPT KILL until the script has ended (or none runs)
// and waits for its call to return.
func killScript(ctx context.Context, admin *redis.Client, script *call) error {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		err := admin.ScriptKill(ctx).Err()
		if err == nil || hasPrefix(err, "NOTBUSY") {
			break
		}
		select {
		case <-script.done:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("SCRIPT KILL: %v: %w", err, ctx.Err())
		case <-tick.C:
		}
	}
	select {
	case <-script.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("the script's call did not return after SCRIPT KILL: %w", ctx.Err())
	}
}
