package main

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/hotkv/stampede/lock"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed record.lua
var recordSrc string

// ErrStaleFence is returned by Store.Record when the write's fencing number
// is below the highest the store has seen for the order: the writer's lock
// expired and someone else has held it since.
var ErrStaleFence = errors.New("payments: stale fence")

// Store is the payment store: per order, its current state and a ledger of
// every charge and refund, on the shared server. The ledger is what moves
// money (settlement pays out what it records), so it is where a late lock
// holder must be stopped. It is safe for concurrent use. Use NewStore to
// create a Store.
type Store struct {
	rdb         *redis.Client
	prefix      string
	checkFences bool
	record      *redis.Script
}

// NewStore returns the store for orders under prefix. With checkFences
// false it records whatever it is sent, as a store that knows nothing of
// fencing does.
func NewStore(rdb *redis.Client, prefix string, checkFences bool) *Store {
	return &Store{rdb: rdb, prefix: prefix, checkFences: checkFences, record: redis.NewScript(recordSrc)}
}

// State is an order's money, in cents, and the fence of its last write.
type State struct {
	Charged, Refunded int64
	Fence             int64
}

// Entry is one line of an order's ledger.
type Entry struct {
	Op     string // "charge" or "refund"
	Amount int64  // cents
	Fence  int64
	Worker string
	At     time.Time
}

// orderKeys are the server keys of one order. They share a hash tag, so the
// script also runs on a cluster.
type orderKeys struct {
	state, ledger, highest, lock string
}

func (s *Store) keys(order string) orderKeys {
	tag := "{" + s.prefix + ":" + order + "}"
	return orderKeys{state: tag + ":state", ledger: tag + ":ledger", highest: tag + ":highest-fence", lock: tag + ":lock"}
}

// LockKey returns the key of the lock that serialises operations on order.
func (s *Store) LockKey(order string) string { return s.keys(order).lock }

// Read returns the order's state; a new order has a zero State.
func (s *Store) Read(ctx context.Context, order string) (State, error) {
	m, err := s.rdb.HGetAll(ctx, s.keys(order).state).Result()
	if err != nil {
		return State{}, fmt.Errorf("payments: read %s: %w", order, err)
	}
	var st State
	for name, p := range map[string]*int64{"charged": &st.Charged, "refunded": &st.Refunded, "fence": &st.Fence} {
		if v, ok := m[name]; ok {
			if *p, err = strconv.ParseInt(v, 10, 64); err != nil {
				return State{}, fmt.Errorf("payments: read %s: field %s: %w", order, name, err)
			}
		}
	}
	return st, nil
}

// Record writes the order's new state and appends e to its ledger, in one
// atomic step, unless e.Fence is below the highest fence the store has seen
// for the order (then it returns an error matching ErrStaleFence and
// changes nothing).
func (s *Store) Record(ctx context.Context, order string, next State, e Entry) error {
	k := s.keys(order)
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	check := "0"
	if s.checkFences {
		check = "1"
	}
	res, err := s.record.Run(ctx, s.rdb, []string{k.state, k.ledger, k.highest},
		e.Fence, check, next.Charged, next.Refunded, string(b)).Int64Slice()
	if err != nil {
		return fmt.Errorf("payments: record %s on %s: %w", e.Op, order, err)
	}
	if len(res) != 2 {
		return fmt.Errorf("payments: record %s on %s: unexpected reply %v", e.Op, order, res)
	}
	if res[0] == 0 {
		return fmt.Errorf("%w: %d is below %d, the highest seen for %s", ErrStaleFence, e.Fence, res[1], order)
	}
	return nil
}

// Ledger returns the order's ledger, oldest first, and the highest fence
// the store has seen for it.
func (s *Store) Ledger(ctx context.Context, order string) ([]Entry, int64, error) {
	k := s.keys(order)
	raw, err := s.rdb.LRange(ctx, k.ledger, 0, -1).Result()
	if err != nil {
		return nil, 0, fmt.Errorf("payments: ledger of %s: %w", order, err)
	}
	entries := make([]Entry, len(raw))
	for i, r := range raw {
		if err := json.Unmarshal([]byte(r), &entries[i]); err != nil {
			return nil, 0, fmt.Errorf("payments: ledger of %s, entry %d: %w", order, i+1, err)
		}
	}
	highest, err := s.rdb.Get(ctx, k.highest).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, 0, fmt.Errorf("payments: highest fence of %s: %w", order, err)
	}
	return entries, highest, nil
}

// Delete removes the order, its ledger and its lock keys.
func (s *Store) Delete(ctx context.Context, order string) error {
	k := s.keys(order)
	keys := []string{k.state, k.ledger, k.highest, k.lock}
	if fence, ok := lock.FenceKey(k.lock); ok {
		keys = append(keys, fence)
	}
	return s.rdb.Del(ctx, keys...).Err()
}
