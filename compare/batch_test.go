package compare

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/loader"
	"github.com/redis/go-redis/v9"
	"github.com/viccon/sturdyc"
)

// The batch comparison (issue 14 item 1): an endpoint that takes 1,000 ids
// of which 10 % are in no cache yet, called at once in 4 instances (each
// with its own client and connections, standing in for processes). The
// data source answers a query, of one id or of many, in batchQuery.
const (
	batchKeys    = 1000
	batchMissing = 100 // every tenth id
	batchQuery   = 5 * time.Millisecond
)

// source is the data source: it counts its queries and the ids they ask
// for, in every instance.
type source struct {
	calls, ids atomic.Int64
}

func (s *source) many(ctx context.Context, ids []string) (map[string]string, error) {
	s.calls.Add(1)
	s.ids.Add(int64(len(ids)))
	if err := pause(ctx, batchQuery); err != nil {
		return nil, err
	}
	out := make(map[string]string, len(ids))
	for _, id := range ids {
		out[id] = "row " + id
	}
	return out, nil
}

func (s *source) one(id string) loader.Func[string] {
	return func(ctx context.Context) (string, error) {
		s.calls.Add(1)
		s.ids.Add(1)
		if err := pause(ctx, batchQuery); err != nil {
			return "", err
		}
		return "row " + id, nil
	}
}

func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C: // the query
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// trips is a go-redis hook counting what its clients send: round trips
// (a command, or a pipeline, sent and answered) and commands.
type trips struct {
	trips, cmds atomic.Int64
}

func (h *trips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *trips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch cmd.Name() {
		case "hello", "client", "auth", "select": // each new connection's handshake
		default:
			h.trips.Add(1)
			h.cmds.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *trips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.trips.Add(1)
		h.cmds.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// redisStorage is sturdyc's DistributedStorage on Redis: GetBatch is one
// MGET, SetBatch one pipeline of SETs, as a user of sturdyc would write it.
type redisStorage struct {
	rc  redis.UniversalClient
	ns  string
	ttl time.Duration
}

func (r *redisStorage) Get(ctx context.Context, key string) ([]byte, bool) {
	b, err := r.rc.Get(ctx, r.ns+key).Bytes()
	return b, err == nil
}

func (r *redisStorage) Set(ctx context.Context, key string, value []byte) {
	r.rc.Set(ctx, r.ns+key, value, r.ttl)
}

func (r *redisStorage) GetBatch(ctx context.Context, keys []string) map[string][]byte {
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = r.ns + k
	}
	vals, err := r.rc.MGet(ctx, names...).Result()
	out := make(map[string][]byte, len(keys))
	if err != nil {
		return out
	}
	for i, v := range vals {
		if s, ok := v.(string); ok {
			out[keys[i]] = []byte(s)
		}
	}
	return out
}

func (r *redisStorage) SetBatch(ctx context.Context, records map[string][]byte) {
	pipe := r.rc.Pipeline()
	for k, v := range records {
		pipe.Set(ctx, r.ns+k, v, r.ttl)
	}
	_, _ = pipe.Exec(ctx)
}

// batchRow is one way of serving the endpoint: call(ctx, i, ids) is
// instance i's call for the ids; warm stores the ids it is given.
type batchRow struct {
	name string
	warm func(ctx context.Context, ids []string) error
	call func(ctx context.Context, i int, ids []string) (map[string]string, error)
	h    *trips  // of the instances' clients
	src  *source // of the instances' loads
}

func TestCompare_batch(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ids := make([]string, batchKeys)
	var warm []string
	for i := range ids {
		ids[i] = fmt.Sprintf("item:%04d", i)
		if i%(batchKeys/batchMissing) != 0 {
			warm = append(warm, ids[i])
		}
	}
	newClient := func(h *trips) redis.UniversalClient {
		rc := s.NewClient()
		t.Cleanup(func() { _ = rc.Close() })
		if h != nil {
			rc.AddHook(h)
		}
		return rc
	}
	stampedeRow := func(name string, call func(ctx context.Context, c *cache.Cache, src *source, ids []string) (map[string]string, error)) batchRow {
		ns := namespace()
		r := batchRow{name: name, h: &trips{}, src: &source{}}
		opts := &cache.Options{Namespace: ns, Expiry: cache.ExpiryPolicy{Fresh: time.Hour}}
		warmer, err := cache.New(newClient(nil), opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { warmer.Close() })
		var cs []*cache.Cache
		for range instances {
			c, err := cache.New(newClient(r.h), opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			cs = append(cs, c)
		}
		r.warm = func(ctx context.Context, ids []string) error {
			_, err := cache.GetOrLoadMany(ctx, warmer, ids, (&source{}).many)
			// Each instance meets its server once before the run (the
			// capability probe), as a process in service has.
			for _, c := range cs {
				if err == nil {
					_, err = cache.GetOrLoad(ctx, c, "probe", (&source{}).one("probe"))
				}
			}
			return err
		}
		r.call = func(ctx context.Context, i int, ids []string) (map[string]string, error) {
			return call(ctx, cs[i], r.src, ids)
		}
		return r
	}
	mkRows := func() []batchRow {
		return []batchRow{
			stampedeRow("stampede GetOrLoadMany", func(ctx context.Context, c *cache.Cache, src *source, ids []string) (map[string]string, error) {
				return cache.GetOrLoadMany(ctx, c, ids, src.many)
			}),
			stampedeRow("stampede 1,000 × GetOrLoad, sequential", func(ctx context.Context, c *cache.Cache, src *source, ids []string) (map[string]string, error) {
				out := make(map[string]string, len(ids))
				for _, id := range ids {
					v, err := cache.GetOrLoad(ctx, c, id, src.one(id))
					if err != nil {
						return nil, err
					}
					out[id] = v
				}
				return out, nil
			}),
			stampedeRow("stampede 1,000 × GetOrLoad, concurrent", func(ctx context.Context, c *cache.Cache, src *source, ids []string) (map[string]string, error) {
				var mu sync.Mutex
				var first error
				out := make(map[string]string, len(ids))
				var wg sync.WaitGroup
				for _, id := range ids {
					wg.Add(1)
					go func() {
						defer wg.Done()
						v, err := cache.GetOrLoad(ctx, c, id, src.one(id))
						mu.Lock()
						defer mu.Unlock()
						if err != nil && first == nil {
							first = err
						}
						out[id] = v
					}()
				}
				wg.Wait()
				return out, first
			}),
			sturdycRow(t, newClient),
		}
	}
	// Each row runs batchRounds times, each time on fresh instances and
	// keys; the median of each measure is reported (the machine is shared).
	type measures struct{ trips, cmds, calls, loaded, wall []float64 }
	byRow := map[string]*measures{}
	var names []string
	for range batchRounds {
		for _, r := range mkRows() {
			m := byRow[r.name]
			if m == nil {
				m = &measures{}
				byRow[r.name] = m
				names = append(names, r.name)
			}
			wall := runBatchRow(t, r, warm, ids)
			m.trips = append(m.trips, float64(r.h.trips.Load()))
			m.cmds = append(m.cmds, float64(r.h.cmds.Load()))
			m.calls = append(m.calls, float64(r.src.calls.Load()))
			m.loaded = append(m.loaded, float64(r.src.ids.Load()))
			m.wall = append(m.wall, float64(wall.Microseconds())/1000)
			if r.name != "sturdyc GetOrFetchBatch" && r.src.ids.Load() != batchMissing {
				t.Errorf("%s: %d ids loaded across %d instances, want each of the %d missing once", r.name, r.src.ids.Load(), instances, batchMissing)
			}
		}
	}
	for _, name := range names {
		m := byRow[name]
		result(t, "batch", name, "round_trips", median(m.trips))
		result(t, "batch", name, "commands", median(m.cmds))
		result(t, "batch", name, "loader_calls", median(m.calls))
		result(t, "batch", name, "ids_loaded", median(m.loaded))
		result(t, "batch", name, "wall_ms", fmt.Sprintf("%.1f (rounds: %v)", median(m.wall), m.wall))
	}
}

// batchRounds is how many times each row runs.
const batchRounds = 5

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// runBatchRow warms r with warm, then lets its instances call for ids at
// once, and returns the time until the last one had every value. Its
// deadline is on progress (commands sent, loader calls), not on the whole:
// a busy machine makes a row slow, not stuck.
func runBatchRow(t *testing.T, r batchRow, warm, ids []string) time.Duration {
	t.Helper()
	ctx := redistest.Progress(t, t.Context(), 15*time.Second, r.name, func() int64 {
		return r.h.cmds.Load() + r.src.calls.Load() + r.src.ids.Load()
	})
	{
		if err := r.warm(ctx, warm); err != nil {
			t.Fatalf("%s: warm: %v", r.name, err)
		}
		r.h.trips.Store(0)
		r.h.cmds.Store(0)
		release := make(chan struct{})
		errs := make(chan error, instances)
		var wg sync.WaitGroup
		for i := range instances {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-release
				got, err := r.call(ctx, i, ids)
				if err == nil {
					for _, id := range ids {
						if got[id] != "row "+id {
							err = fmt.Errorf("instance %d: %s = %q", i, id, got[id])
							break
						}
					}
				}
				errs <- err
			}()
		}
		start := time.Now()
		close(release)
		wg.Wait()
		wall := time.Since(start)
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("%s: %v", r.name, err)
			}
		}
		return wall
	}
}

// sturdycRow is sturdyc's GetOrFetchBatch in each instance, sharing Redis
// through a DistributedStorage (MGET and pipelined SETs); each instance's
// memory starts empty, as a process's does.
func sturdycRow(t *testing.T, newClient func(*trips) redis.UniversalClient) batchRow {
	ns := namespace() + ":"
	r := batchRow{name: "sturdyc GetOrFetchBatch", h: &trips{}, src: &source{}}
	newSturdyc := func(rc redis.UniversalClient) *sturdyc.Client[string] {
		return sturdyc.New[string](10*batchKeys, 10, time.Hour, 10, sturdyc.WithNoContinuousEvictions(),
			sturdyc.WithDistributedStorage(&redisStorage{rc: rc, ns: ns, ttl: time.Hour}))
	}
	wrc := newClient(nil)
	warmer := newSturdyc(wrc)
	var cs []*sturdyc.Client[string]
	for range instances {
		cs = append(cs, newSturdyc(newClient(r.h)))
	}
	r.warm = func(ctx context.Context, ids []string) error {
		if _, err := warmer.GetOrFetchBatch(ctx, ids, warmer.BatchKeyFn("item"), (&source{}).many); err != nil {
			return err
		}
		// sturdyc writes to the distributed storage in the background:
		// the run starts once the ids are there.
		names := make([]string, len(ids))
		for i, id := range ids {
			names[i] = ns + warmer.BatchKeyFn("item")(id)
		}
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			n, err := wrc.Exists(ctx, names...).Result()
			if err != nil || n == int64(len(ids)) {
				return err
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("sturdyc stored %d of %d ids: %w", n, len(ids), ctx.Err())
			case <-tick.C:
			}
		}
	}
	r.call = func(ctx context.Context, i int, ids []string) (map[string]string, error) {
		return cs[i].GetOrFetchBatch(ctx, ids, cs[i].BatchKeyFn("item"), r.src.many)
	}
	return r
}
