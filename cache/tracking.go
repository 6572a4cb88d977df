package cache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/hotkv/stampede/internal/redisx"
)

// Tracking: each process asks the server for the names of the keys that
// change, on a connection of its own per node (the tracker), subscribed to
// __redis__:invalidate under RESP2. The connection is made with the
// caller's client options (address, credentials, TLS), so it needs no
// configuration.
//
// On a single server and a Redis Cluster tracking is targeted: the near
// cache fills only from reads sent on the tracker's reader, one
// connection of the process's own to the same node with CLIENT TRACKING
// on, redirected to the tracker, so the server sends the tracker the keys
// this process read, when they change, and nothing else (the server
// remembers who read what: its tracking table). A write is then delivered
// to the processes that hold the key, not to all of them. When the
// tracker connects again its reader is replaced: a reader redirecting to
// a closed tracker would get no invalidations (see tracker.lost for the
// order that keeps fills through an old reader out), and a reader
// connection that ends flushes (see newReader). On a Ring (whose
// shard for a key is not exposed) tracking is broadcast: the tracker asks
// for every key under the namespace's prefix (BCAST), and the near cache
// fills from any read.
//
// The connection also carries pings, every lease/4; their answers are
// what keeps the near cache trusted (nearCache.trusted). A connection
// lost, or silent for 3 leases, is closed and made again, and the near
// cache is flushed.
//
// On a Cluster a node can stop owning its slots while it stays up and
// answers pings: CLUSTER FAILOVER (TAKEOVER or not) makes its replica the
// master and it a replica, which hears the new master's writes only once
// it has synced. So each ping round asks the node, on the reader, about a
// key in a slot it masters (tracker.probe): MOVED ends the tracking
// connection, which flushes, as a lost one does; and a lost or disowned
// node asks watch to look at the masters at once.
//
// A failover client (redis.NewFailoverClient) asks a Sentinel for the
// master on every dial, and so do the tracker's connections, which are
// made with its options. But a connection stays where it was dialed, and
// after a graceful failover the old master stays up and writable for
// seconds, answering pings and hearing none of the new master's writes.
// So the tracker follows the master the client follows: each ping round
// first asks the client's Sentinel through its dialer (the master it
// names is the one the client's own writes go to), and a ping is sent
// only while that is the node the tracking connection reached; a new
// master ends the connection, which flushes, and the next one reaches
// the new master. A reader that reaches another node than its tracking
// connection is refused.

const invalidateChannel = "__redis__:invalidate"

// tracking runs the trackers of one Cache.
type tracking struct {
	n      *nearCache
	logger func(level slog.Level, msg string, args ...any)

	mu       sync.Mutex // guards trackers, refused, off and the computation of n.trusted
	trackers map[string]*tracker
	refused  error                // the server refused tracking (a definite refusal): the near cache is off until a tracker connects
	off      error                // the near cache cannot run with this client, for good
	recheck  func() time.Duration // how long a refused tracker waits before it asks again

	// targeted: fills read through the trackers' readers (see above);
	// otherwise tracking is BCAST on the prefix. cluster, if set, finds a
	// key's master.
	targeted bool
	cluster  *redis.ClusterClient
	hook     redis.Hook    // added to every reader (tests); guarded by mu
	kick     chan struct{} // asks watch to look at the nodes now; nil without watch

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// tracker is the tracking connection to one node.
type tracker struct {
	t      *tracking
	addr   string
	opts   *redis.Options
	alive  atomic.Int64 // send time (Unix ns) of the last answered ping; 0 until one after (re)connecting
	ps     atomic.Pointer[redis.PubSub]
	cancel context.CancelFunc

	// Targeted tracking: id is the tracking connection's client ID (set on
	// each connect), reader the client whose connections redirect their
	// tracking to it; nil while there is none.
	id     atomic.Int64
	reader atomic.Pointer[redis.Client]

	connects atomic.Uint64 // connections made (OnConnect calls)

	// A failover client's tracker (see the overview): node is the address
	// the tracking connection reached ("" before), moved that a ping round
	// found the master elsewhere.
	failover bool
	node     atomic.Pointer[string]
	moved    atomic.Bool

	// A Cluster master's tracker: probeKey is a key of the namespace in a
	// slot the node masters by the client's slot map (see probe); nil
	// until one is found, and again after the node disowned it.
	probeKey atomic.Pointer[string]

	pmu     sync.Mutex
	pending []int64 // send times of the pings not yet answered, oldest first
	done    chan struct{}
}

// startTracking starts the trackers for rc's nodes in the background. A
// client whose nodes it cannot name (not a *redis.Client, ClusterClient
// or Ring) leaves the near cache off.
func startTracking(rc RedisClient, n *nearCache, logf func(slog.Level, string, ...any), recheck func() time.Duration) *tracking {
	t := &tracking{n: n, logger: logf, trackers: make(map[string]*tracker), recheck: recheck}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	switch c := rc.(type) {
	case *redis.Client:
		t.targeted = true
		t.set(map[string]*redis.Options{c.Options().Addr: c.Options()})
	case *redis.ClusterClient:
		// Fills read from the masters, through the trackers' readers,
		// whatever the client's own routing (replicas included).
		t.targeted, t.cluster = true, c
		// ForEachMaster reloads the Cluster's state (CLUSTER SLOTS): every
		// clusterWatch, and when a fill finds its key's master untracked
		// (fillSource) or a tracker lost its node or found it no longer
		// master (run). Nothing depends on it for coherence: a key is
		// filled only through its master's reader, and a master that goes
		// away or loses its slots ends its tracker, which flushes.
		t.watch(clusterWatch, func(ctx context.Context) (map[string]*redis.Options, error) {
			return nodes(ctx, c.ForEachMaster)
		})
	case *redis.Ring:
		t.watch(n.lease/2, func(ctx context.Context) (map[string]*redis.Options, error) {
			return nodes(ctx, c.ForEachShard)
		})
	default:
		t.off = fmt.Errorf("cache: near cache: cannot track the nodes of a %T", rc)
		logf(slog.LevelWarn, "near cache off", "err", t.off)
	}
	return t
}

// nodes collects the options of the nodes forEach visits, by address.
func nodes(ctx context.Context, forEach func(context.Context, func(context.Context, *redis.Client) error) error) (map[string]*redis.Options, error) {
	var mu sync.Mutex
	m := make(map[string]*redis.Options)
	err := forEach(ctx, func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		m[c.Options().Addr] = c.Options()
		return nil
	})
	return m, err
}

// clusterWatch is how often the trackers of a Cluster are checked against
// its masters, besides when a fill finds an untracked master. Each check
// reloads the client's view of the Cluster: every Lease/2 that was 1.2 to
// 1.5 KB/s per process at the servers (bench/fleet).
const clusterWatch = 10 * time.Second

// watch keeps the trackers in step with the nodes list returns: every
// period, at once, and when kicked (see fillSource and tracker.probe). A
// change of nodes flushes the near cache: a key may have moved to a node
// that was not tracked.
func (t *tracking) watch(period time.Duration, list func(context.Context) (map[string]*redis.Options, error)) {
	t.kick = make(chan struct{}, 1)
	t.wg.Go(func() {
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			looked := time.Now()
			ctx, cancel := context.WithTimeout(t.ctx, t.n.lease)
			m, err := list(ctx)
			cancel()
			if err == nil && len(m) > 0 {
				t.set(m)
			}
			select {
			case <-t.ctx.Done():
				return
			case <-tick.C:
			case <-t.kick:
				// A kick is acted on at once, but looks that follow
				// kicks are kickEvery apart: a master not tracked yet
				// only costs fills until then, and a node that lost its
				// slots serves nothing meanwhile (its tracker ended).
				select {
				case <-t.ctx.Done():
					return
				case <-time.After(time.Until(looked.Add(t.kickEvery()))):
				}
			}
		}
	})
}

// set makes the trackers those of the nodes in m.
func (t *tracking) set(m map[string]*redis.Options) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ctx.Err() != nil || t.off != nil {
		return
	}
	changed := false
	for addr, tr := range t.trackers {
		if _, ok := m[addr]; !ok {
			tr.stop()
			delete(t.trackers, addr)
			changed = true
		}
	}
	for addr, o := range m {
		if _, ok := t.trackers[addr]; !ok {
			t.trackers[addr] = t.start(addr, o)
			changed = true
		}
	}
	if changed {
		t.n.flush()
		t.retrustLocked()
	}
}

func (t *tracking) start(addr string, o *redis.Options) *tracker {
	ctx, cancel := context.WithCancel(t.ctx)
	tr := &tracker{t: t, addr: addr, opts: o, cancel: cancel, done: make(chan struct{}), failover: isFailover(o)}
	t.wg.Go(func() {
		defer close(tr.done)
		tr.run(ctx)
	})
	return tr
}

func (tr *tracker) stop() {
	tr.dropReader()
	tr.cancel()
	if ps := tr.ps.Load(); ps != nil {
		_ = ps.Close()
	}
}

// fillSource says where a fill of key reads: through c (the tracker's
// reader for key's node), or, with c nil and ok true, through the
// caller's client (broadcast tracking). ok false: no fill is possible now
// (no reader, or the key's node is not tracked); read without one.
//
// Call it after nearCache.begin: a reader taken before a flush belongs to
// a fill that the flush cancels (see tracker.lost).
func (t *tracking) fillSource(ctx context.Context, key string) (c *redis.Client, ok bool) {
	if !t.targeted {
		return nil, true
	}
	addr := ""
	if t.cluster != nil {
		node, err := t.cluster.MasterForKey(ctx, key)
		if err != nil {
			return nil, false
		}
		addr = node.Options().Addr
	}
	t.mu.Lock()
	var tr *tracker
	if t.cluster == nil {
		for _, one := range t.trackers {
			tr = one
		}
	} else {
		tr = t.trackers[addr]
	}
	t.mu.Unlock()
	if tr == nil {
		t.kickWatch() // a master not tracked yet
		return nil, false
	}
	c = tr.reader.Load()
	return c, c != nil
}

// kickEvery is how far apart the looks at the nodes that kicks ask for
// are: half a Lease, between 100ms and a second. Kicks come while a node
// is lost or disowned a slot, or a fill finds an untracked master, so
// during a failover; a look is one CLUSTER SLOTS from the process.
func (t *tracking) kickEvery() time.Duration {
	return min(max(t.n.lease/2, 100*time.Millisecond), time.Second)
}

// kickWatch asks watch, if it runs, to look at the nodes now.
func (t *tracking) kickWatch() {
	if t.kick != nil {
		select {
		case t.kick <- struct{}{}:
		default:
		}
	}
}

// newReader makes the client whose connections redirect their tracking
// to the tracking connection id: the caller's options, RESP2, a few
// connections (a key read on several is tracked, and invalidated, once
// per connection).
//
// The server forgets what a connection read when the connection ends: the
// invalidations of those keys are lost. So the reader has one connection,
// pinged before every ping of the tracking connection (see ping): a
// reader connection that ends, on either side, is closed by go-redis at
// the latest when that ping fails, and its close flushes the near cache
// (readerConn). Entries read through a connection the server dropped are
// served at most until then: a quarter of a Lease, plus the ping.
func (tr *tracker) newReader(id int64) *redis.Client {
	o := connOptions(tr.opts, func(ctx context.Context, cn *redis.Conn) error {
		return cn.Do(ctx, "CLIENT", "TRACKING", "on", "REDIRECT", id).Err()
	})
	// One connection, pipelines included (go-redis gives them a pool of their
	// own by default, and dials past PoolSize without MaxActiveConns).
	o.PoolSize, o.MaxActiveConns, o.MaxIdleConns, o.PipelinePoolSize = 1, 1, 0, -1
	dial := o.Dialer
	if dial == nil {
		dial = redis.NewDialer(o)
	}
	o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		cn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if tr.failover {
			// The Sentinel may name a new master by now: a reader there
			// would redirect to a client ID of another server.
			if node := tr.node.Load(); node == nil || *node != cn.RemoteAddr().String() {
				_ = cn.Close()
				return nil, fmt.Errorf("cache: near cache: the reader reached %s, not the tracking connection's node", cn.RemoteAddr())
			}
		}
		return &readerConn{Conn: cn, closed: tr.t.n.flush}, nil
	}
	c := redis.NewClient(o)
	tr.t.mu.Lock()
	if h := tr.t.hook; h != nil {
		c.AddHook(h)
	}
	tr.t.mu.Unlock()
	return c
}

// readerConn is a connection of a reader: closing it flushes the near
// cache (see newReader).
type readerConn struct {
	net.Conn
	once   sync.Once
	closed func()
}

func (c *readerConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.closed)
	return err
}

// connOptions returns the options of a connection of the near cache's own
// made from the caller's client options o: RESP2 (invalidations as
// pub/sub messages, redirected to a connection), a pool of one, none of
// the caller's client-side features (they need RESP3), and on connecting
// the caller's OnConnect, then onConnect.
func connOptions(o *redis.Options, onConnect func(context.Context, *redis.Conn) error) *redis.Options {
	c := *o
	user := c.OnConnect
	c.Protocol = 2
	c.PoolSize, c.MinIdleConns, c.MaxIdleConns = 1, 0, 0
	c.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	c.ClientSideCacheConfig, c.ClientSideCache = nil, nil
	c.OnConnect = func(ctx context.Context, cn *redis.Conn) error {
		if user != nil {
			if err := user(ctx, cn); err != nil {
				return err
			}
		}
		return onConnect(ctx, cn)
	}
	return &c
}

// failoverAddr is the address in the options of a failover client
// (go-redis's FailoverOptions.clientOptions); its Dialer asks a Sentinel
// for the master on every dial.
const failoverAddr = "FailoverClient"

func isFailover(o *redis.Options) bool { return o.Addr == failoverAddr && o.Dialer != nil }

// master returns the address of the master that the client follows now,
// as its dialer finds it (it asks the Sentinel the client asks), by
// dialing it. Only for a failover client's tracker.
func (tr *tracker) master(ctx context.Context) (string, error) {
	cn, err := tr.opts.Dialer(ctx, "tcp", tr.opts.Addr)
	if err != nil {
		return "", err
	}
	addr := cn.RemoteAddr().String()
	_ = cn.Close()
	return addr, nil
}

// dropReader closes the reader, if any; fills then read without one until
// the tracker has connected again.
func (tr *tracker) dropReader() {
	if c := tr.reader.Swap(nil); c != nil {
		_ = c.Close()
	}
}

// active reports whether entries may be served now (by the coarse clock,
// which near hits read).
func (t *tracking) active() bool {
	return t != nil && coarse.now.Load() < t.n.trusted.Load()
}

// retrustLocked sets how long entries may be served: a lease past the
// oldest answered ping of all trackers (none while one has not answered).
func (t *tracking) retrustLocked() {
	until := int64(0)
	for _, tr := range t.trackers {
		a := tr.alive.Load()
		if a == 0 {
			until = 0
			break
		}
		if u := a + int64(t.n.lease); until == 0 || u < until {
			until = u
		}
	}
	t.n.trusted.Store(until)
}

func (t *tracking) retrust() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.retrustLocked()
}

// refuse records that the server refused tracking definitely (an ACL
// without CLIENT TRACKING, a server without it; see redisx.IsRefusal):
// the near cache stays off while a tracker is refused (it has no answered
// ping), and each refused tracker asks again every recheck. It warns once
// per reply.
func (t *tracking) refuse(err error) {
	t.mu.Lock()
	first := t.refused == nil || t.refused.Error() != err.Error()
	t.refused = err
	t.mu.Unlock()
	if first {
		t.logger(slog.LevelWarn, "near cache off: the server refused CLIENT TRACKING; asking again later", "err", err, "retry_after", t.recheck())
	}
}

// accepted is told when a tracker turned tracking on: a refusal standing
// is over, and said to be.
func (t *tracking) accepted() {
	t.mu.Lock()
	was := t.refused
	t.refused = nil
	t.mu.Unlock()
	if was != nil {
		t.logger(slog.LevelInfo, "near cache on again: the server accepted CLIENT TRACKING", "was", was)
	}
}

// refusal returns the server's standing refusal of tracking, "" if none.
func (t *tracking) refusal() string {
	if t == nil {
		return ""
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.refused != nil {
		return t.refused.Error()
	}
	return ""
}

func (t *tracking) close() {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.cancel()
	for _, tr := range t.trackers {
		tr.stop()
	}
	t.mu.Unlock()
	t.wg.Wait()
	t.n.trusted.Store(0)
}

// run keeps a tracking connection to the node up until ctx ends.
func (tr *tracker) run(ctx context.Context) {
	var refused atomic.Pointer[error]
	prefix := tr.t.n.prefix
	o := connOptions(tr.opts, func(ctx context.Context, cn *redis.Conn) error {
		tr.connects.Add(1)
		id, err := cn.ClientID(ctx).Result()
		if err == nil {
			tr.id.Store(id)
			if tr.t.targeted {
				// The readers track for this connection; tracking here
				// too (it reads nothing) asks for the permission the
				// readers need, so a refusal turns the near cache off.
				err = cn.Do(ctx, "CLIENT", "TRACKING", "on", "REDIRECT", id).Err()
			} else {
				err = cn.Do(ctx, "CLIENT", "TRACKING", "on", "REDIRECT", id, "BCAST", "PREFIX", prefix).Err()
			}
		}
		switch {
		case err == nil:
			tr.t.accepted()
		case redisx.IsRefusal(err):
			refused.Store(&err) // the subscription goes on, and run sees this
			return nil
		}
		// Any other reply (BUSY, LOADING, ...) or a broken connection
		// fails this connection only: run makes it again.
		return err
	})
	if tr.failover {
		dial := o.Dialer
		o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			cn, err := dial(ctx, network, addr)
			if err == nil {
				node := cn.RemoteAddr().String()
				tr.node.Store(&node)
			}
			return cn, err
		}
	}
	client := redis.NewClient(o)
	defer client.Close()
	for ctx.Err() == nil {
		ps := client.Subscribe(ctx, invalidateChannel)
		tr.ps.Store(ps)
		if ctx.Err() != nil { // stop raced with the Store: it may not have seen ps
			_ = ps.Close()
			return
		}
		err := tr.serve(ctx, ps, &refused)
		_ = ps.Close()
		tr.lost()
		wait := min(tr.t.n.lease/4, 100*time.Millisecond)
		moved := tr.moved.Swap(false)
		if p := refused.Swap(nil); p != nil {
			tr.t.refuse(fmt.Errorf("cache: near cache: %w", *p))
			wait = tr.t.recheck()
		} else if redisx.IsRefusal(err) { // SUBSCRIBE to the invalidations refused
			tr.t.refuse(fmt.Errorf("cache: near cache: %w", err))
			wait = tr.t.recheck()
		} else if moved {
			tr.t.logger(slog.LevelInfo, "near cache: the master changed; following it", "addr", tr.addr)
			tr.t.kickWatch()
		} else if ctx.Err() == nil {
			tr.t.logger(slog.LevelWarn, "near cache: tracking connection lost; reading from the server until it is back", "addr", tr.addr, "err", err)
			// A node that is gone may have a successor (a replica
			// promoted): watch looks now (then kickEvery apart), rather
			// than wait for its period while nothing is served.
			tr.t.kickWatch()
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

// serve receives invalidations and pongs on ps until it fails, pinging
// it meanwhile.
func (tr *tracker) serve(ctx context.Context, ps *redis.PubSub, refused *atomic.Pointer[error]) error {
	conn := tr.connects.Load() // Subscribe has connected
	if tr.t.targeted && refused.Load() == nil {
		tr.reader.Store(tr.newReader(tr.id.Load()))
	}
	tr.pmu.Lock()
	tr.pending = tr.pending[:0]
	tr.pmu.Unlock()
	stop := make(chan struct{})
	var pinger sync.WaitGroup
	pinger.Go(func() { tr.ping(ctx, ps, stop) })
	defer func() {
		close(stop)
		_ = ps.Close() // ends a ping in flight
		pinger.Wait()
	}()
	for {
		msg, err := ps.Receive(ctx)
		if err != nil {
			return err
		}
		if refused.Load() != nil {
			return nil
		}
		if tr.connects.Load() != conn {
			// The client connected again on its own (after a failed ping):
			// what was sent on the old connection in between is lost.
			return errReconnected
		}
		switch m := msg.(type) {
		case *redis.Message:
			if m.Channel != invalidateChannel {
				continue
			}
			if len(m.PayloadSlice) == 0 && m.Payload == "" {
				tr.t.n.flush() // FLUSHALL, FLUSHDB
				continue
			}
			if m.Payload != "" {
				tr.t.n.invalidateKey(m.Payload)
			}
			for _, k := range m.PayloadSlice {
				tr.t.n.invalidateKey(k)
			}
		case *redis.Pong:
			if sent, err := strconv.ParseInt(m.Payload, 10, 64); err == nil {
				if !tr.pong(sent) {
					return errPingLost
				}
			}
		}
	}
}

// ping pings ps every lease/4, and closes it when no ping was answered
// for 3 leases (a silent network failure): run then connects again.
func (tr *tracker) ping(ctx context.Context, ps *redis.PubSub, stop <-chan struct{}) {
	lease := tr.t.n.lease
	tick := time.NewTicker(lease / 4)
	defer tick.Stop()
	start := time.Now().UnixNano()
	for {
		now := time.Now().UnixNano()
		if last := max(tr.alive.Load(), start); now-last > 3*int64(lease) {
			_ = ps.Close()
			return
		}
		if !tr.pingOnce(ctx, ps, now) {
			_ = ps.Close() // the connection failed; run connects again
			return
		}
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// pingOnce pings the reader, then, if it answered, ps with the send time
// now; it reports false when ps failed, or must be made again.
//
// The reader's connection comes first: a tracking ping answered says the
// reader was there too (see newReader). A failed reader ping sends no
// tracking ping this round; the reader's connection was closed, which
// flushed, and the next round dials a new one.
//
// A failover client's tracker asks for the master before both (see the
// overview): a ping answered then says the node was the master at now or
// later. No answer sends no ping this round; another master ends ps. A
// Cluster tracker's reader ping is a probe of a slot the node masters
// (see probe): MOVED ends ps, so a ping answered says the node still
// owned its slot at now or later.
func (tr *tracker) pingOnce(ctx context.Context, ps *redis.PubSub, now int64) bool {
	pctx, cancel := context.WithTimeout(ctx, tr.t.n.lease)
	defer cancel()
	if tr.failover {
		master, err := tr.master(pctx)
		if err != nil {
			return true
		}
		if node := tr.node.Load(); node == nil || *node != master {
			tr.moved.Store(true)
			return false
		}
	}
	if r := tr.reader.Load(); r != nil {
		if err := tr.probe(pctx, r); err != nil {
			if _, ok := redis.IsMovedError(err); ok {
				tr.moved.Store(true)
				return false
			}
			return true
		}
	}
	tr.pmu.Lock()
	tr.pending = append(tr.pending, now)
	tr.pmu.Unlock()
	return ps.Ping(pctx, strconv.FormatInt(now, 10)) == nil
}

// probe is the reader's half of a ping round: a PING, or on a Cluster a
// PTTL of the tracker's probe key, which a node answers only while it
// masters the key's slot: a node that lost it (a replica promoted in its
// place, by CLUSTER FAILOVER, TAKEOVER or election; a resharding) answers
// MOVED, and pingOnce then ends the tracking connection, as a lost one
// is, which flushes and asks watch to look at the masters at once. So
// entries read from a node are served at most a Lease past the last
// round in which it still owned the slot, as for a node that stops
// answering. PTTL is what fills send already: no other permission.
func (tr *tracker) probe(ctx context.Context, r *redis.Client) error {
	if tr.t.cluster == nil {
		return r.Ping(ctx).Err()
	}
	key := tr.probeKey.Load()
	if key == nil {
		key = tr.findProbeKey(ctx)
		if key == nil {
			return r.Ping(ctx).Err() // no key found in its slots: a liveness check only
		}
		tr.probeKey.Store(key)
	}
	err := r.PTTL(ctx, *key).Err()
	if _, ok := redis.IsMovedError(err); ok {
		tr.probeKey.Store(nil) // the next connection looks again, once watch has the new map
	}
	return err
}

// findProbeKey returns a key of the namespace whose slot tr's node
// masters by the client's slot map, or nil when a thousand candidates
// found none (a node with a handful of slots).
func (tr *tracker) findProbeKey(ctx context.Context) *string {
	for i := range 1024 {
		k := tr.t.n.prefix + "stampede-probe-" + strconv.Itoa(i) + "}"
		m, err := tr.t.cluster.MasterForKey(ctx, k)
		if err != nil {
			return nil
		}
		if m.Options().Addr == tr.addr {
			return &k
		}
	}
	return nil
}

var (
	errReconnected = errors.New("cache: near cache: tracking connection made again")
	errPingLost    = errors.New("cache: near cache: a ping went unanswered")
)

// pong records the answer to a ping sent at sent (Unix ns): every change
// the server made before it reached the ping has been received. After a
// lapse (no answer for a lease) the near cache is flushed first: changes
// made meanwhile may have arrived late. An earlier ping left unanswered
// means the connection lost what it carried: pong reports false, and the
// connection is made again.
func (tr *tracker) pong(sent int64) bool {
	tr.pmu.Lock()
	i := 0
	for i < len(tr.pending) && tr.pending[i] < sent {
		i++
	}
	skipped := i > 0
	if i < len(tr.pending) && tr.pending[i] == sent {
		i++
	}
	tr.pending = tr.pending[i:]
	tr.pmu.Unlock()
	if skipped {
		return false
	}
	prev := tr.alive.Load()
	if sent <= prev {
		return true
	}
	if sent-prev > int64(tr.t.n.lease) {
		tr.t.n.flush()
	}
	tr.alive.Store(sent)
	tr.t.retrust()
	return true
}

// lost records that the connection failed: nothing is served until a
// ping on a new one is answered, and the near cache is flushed.
//
// The reader goes before the flush: a fill that took it (after its
// nearCache.begin) began before the flush, which cancels it, so nothing
// read through a reader whose invalidations may be lost is installed.
func (tr *tracker) lost() {
	tr.dropReader()
	tr.alive.Store(0)
	tr.t.n.flush()
	tr.t.retrust()
}
