package nemesis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

func (r *run) oom(ctx context.Context) error {
	old, err := configGet(ctx, r.admin, "maxmemory", "maxmemory-policy")
	if err != nil {
		return fmt.Errorf("nemesis: oom: %w", err)
	}
	mem, err := info(ctx, r.admin, "memory")
	if err != nil {
		return fmt.Errorf("nemesis: oom: %w", err)
	}
	used, err := strconv.ParseInt(mem["used_memory"], 10, 64)
	if err != nil {
		return fmt.Errorf("nemesis: oom: INFO memory used_memory %q", mem["used_memory"])
	}
	// A quarter under what is used: the usage moves (buffers of clients
	// that come and go), and must stay above the limit for the whole
	// fault. Zero would mean no limit.
	limit := max(used-used/4, 1)
	r.rec.Start = time.Now()
	r.rec.Detail = fmt.Sprintf("maxmemory %d with noeviction, used_memory %d (were %s, %s)",
		limit, used, old["maxmemory"], old["maxmemory-policy"])
	// The policy first: with the old one, a lower limit would evict.
	if err := configSet(ctx, r.admin, "maxmemory-policy", "noeviction"); err != nil {
		return fmt.Errorf("nemesis: oom: %w", err)
	}
	injectErr := configSet(ctx, r.admin, "maxmemory", strconv.FormatInt(limit, 10))
	if injectErr != nil {
		injectErr = fmt.Errorf("nemesis: oom: %w", injectErr)
	}
	var cut error
	if injectErr == nil {
		cut = hold(ctx, r.d, nil)
	}
	rctx, cancel := r.restoreCtx(ctx)
	defer cancel()
	// The limit first, for the same reason.
	restore := configSet(rctx, r.admin, "maxmemory", old["maxmemory"])
	if restore == nil {
		restore = configSet(rctx, r.admin, "maxmemory-policy", old["maxmemory-policy"])
	}
	return errors.Join(injectErr, cut, restoreErr(OOM, restore))
}
