package nemesis

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// fillerPrefix begins the names of the keys the loading fault writes
	// to the server's last database and deletes afterwards.
	fillerPrefix = "nemesis:loading:"
	// fillerSize is a filler value's size: above the smallest
	// loading-process-events-interval-bytes (1024), so that the loading
	// server answers its clients after every filler key. The values are
	// random, so the RDB file's compression keeps them that size.
	fillerSize = 1100
	// maxKeyDelay bounds key-load-delay, and so how long the loading
	// server takes to notice that the fault is over.
	maxKeyDelay = 20 * time.Millisecond
)

func (r *run) loading(ctx context.Context) error {
	old, err := configGet(ctx, r.admin, "enable-debug-command", "key-load-delay",
		"loading-process-events-interval-bytes", "databases", "dir", "dbfilename")
	if err != nil {
		return fmt.Errorf("nemesis: loading: %w", err)
	}
	if old["enable-debug-command"] == "no" {
		return fmt.Errorf("nemesis: loading: the server runs without DEBUG (start it with ServerArgs): %w", ErrUnsupported)
	}
	dbs, err := strconv.Atoi(old["databases"])
	if err != nil || dbs < 1 {
		return fmt.Errorf("nemesis: loading: CONFIG GET databases: %q", old["databases"])
	}
	keys, err := keyCount(ctx, r.admin)
	if err != nil {
		return fmt.Errorf("nemesis: loading: %w", err)
	}
	// Loading is slowed to last about 2d, so that it is still going when
	// d is over; then key-load-delay goes to 0 and the rest loads at once.
	filler := max(200, int(2*r.d/maxKeyDelay))
	delay := min(max(2*r.d/time.Duration(keys+filler), time.Microsecond), maxKeyDelay)
	rdb := filepath.Join(old["dir"], old["dbfilename"])
	_, statErr := os.Stat(rdb)
	rdbExisted := statErr == nil

	fc := redis.NewClient(&redis.Options{Addr: r.addr, DB: dbs - 1, MaxRetries: -1, DisableIdentity: true,
		ContextTimeoutEnabled: true, ReadTimeout: 10 * time.Second})
	defer func() { _ = fc.Close() }()
	r.rec.Start = time.Now()
	r.rec.Detail = fmt.Sprintf("DEBUG RELOAD of %d keys and %d filler keys in db %d, key-load-delay %v", keys, filler, dbs-1, delay)
	injectErr := writeFiller(ctx, fc, filler)
	if injectErr == nil {
		injectErr = configSet(ctx, r.admin, "loading-process-events-interval-bytes", "1024",
			"key-load-delay", strconv.FormatInt(delay.Microseconds(), 10))
	}
	var reload *call
	reloader := redis.NewClient(&redis.Options{Addr: r.addr, ReadTimeout: -1, MaxRetries: -1, PoolSize: 1, DisableIdentity: true})
	defer func() { _ = reloader.Close() }()
	var cut error
	if injectErr == nil {
		reload = goCall(func() error { return reloader.Do(context.WithoutCancel(ctx), "DEBUG", "RELOAD").Err() })
		injectErr = waitReply(ctx, r.admin, "LOADING", reload)
		if injectErr == nil {
			cut = hold(ctx, r.d, reload.done)
		}
	}
	if injectErr != nil {
		injectErr = fmt.Errorf("nemesis: loading: %w", injectErr)
	}

	rctx, cancel := r.restoreCtx(ctx)
	defer cancel()
	var restore []error
	if reload != nil {
		// CONFIG SET is served while loading, at the next key.
		restore = append(restore, configSet(rctx, r.admin, "key-load-delay", "0"))
		select {
		case <-reload.done:
			if reload.err != nil {
				restore = append(restore, fmt.Errorf("DEBUG RELOAD: %w", reload.err))
			}
		case <-rctx.Done():
			restore = append(restore, fmt.Errorf("DEBUG RELOAD still running: %w", rctx.Err()))
		}
	}
	restore = append(restore, configSet(rctx, r.admin, "key-load-delay", old["key-load-delay"],
		"loading-process-events-interval-bytes", old["loading-process-events-interval-bytes"]))
	restore = append(restore, deleteFiller(rctx, fc, filler))
	if !rdbExisted && reload != nil {
		// DEBUG RELOAD saved the dataset there: a server restarted
		// without an append-only file would load it.
		if err := os.Remove(rdb); err != nil && !errors.Is(err, os.ErrNotExist) {
			restore = append(restore, err)
		}
	}
	return errors.Join(injectErr, cut, restoreErr(Loading, errors.Join(restore...)))
}

func fillerKey(i int) string { return fillerPrefix + strconv.Itoa(i) }

// writeFiller writes n filler keys to fc's database.
func writeFiller(ctx context.Context, fc *redis.Client, n int) error {
	for i := 0; i < n; {
		p := fc.Pipeline()
		for end := min(i+500, n); i < end; i++ {
			v := make([]byte, fillerSize)
			_, _ = rand.Read(v)
			p.Set(ctx, fillerKey(i), v, 0)
		}
		if _, err := p.Exec(ctx); err != nil {
			return fmt.Errorf("write filler keys: %w", err)
		}
	}
	return nil
}

// deleteFiller deletes the n filler keys from fc's database.
func deleteFiller(ctx context.Context, fc *redis.Client, n int) error {
	for i := 0; i < n; {
		var batch []string
		for end := min(i+500, n); i < end; i++ {
			batch = append(batch, fillerKey(i))
		}
		if err := fc.Unlink(ctx, batch...).Err(); err != nil {
			return fmt.Errorf("delete filler keys: %w", err)
		}
	}
	return nil
}
