package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"path/filepath"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver (pure Go, no cgo)
)

// The shop database: customers in a few segments, and orders. The data is
// generated from each row's number, so every run has the same answer.
const schema = `
CREATE TABLE customers (
	id      INTEGER PRIMARY KEY,
	segment TEXT    NOT NULL,
	country TEXT    NOT NULL
);
CREATE TABLE orders (
	id           INTEGER PRIMARY KEY,
	customer_id  INTEGER NOT NULL REFERENCES customers(id),
	placed_at    INTEGER NOT NULL, -- Unix seconds
	status       TEXT    NOT NULL,
	amount_cents INTEGER NOT NULL
);`

// fill inserts customers (one per 20 orders) and orders with recursive
// CTEs, which is much faster than row-by-row inserts from Go.
const fill = `
INSERT INTO customers (id, segment, country)
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
SELECT i,
       CASE WHEN i % 97 = 0 THEN 'enterprise'
            WHEN i % 13 = 0 THEN 'mid-market'
            WHEN i % 5  = 0 THEN 'small-business'
            WHEN i % 11 = 0 THEN 'public-sector'
            ELSE 'consumer' END,
       CASE i % 4 WHEN 0 THEN 'DE' WHEN 1 THEN 'FR' WHEN 2 THEN 'US' ELSE 'JP' END
FROM n;

INSERT INTO orders (id, customer_id, placed_at, status, amount_cents)
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?2)
SELECT i,
       (i * 7919) % ?1 + 1,
       1735689600 + (i * 104729) % 31536000, -- some time in 2025
       CASE WHEN i % 23 = 0 THEN 'refunded' WHEN i % 7 = 0 THEN 'pending' ELSE 'paid' END,
       100 + (i * 2654435761) % 250000
FROM n;`

// revenueQuery is the expensive query: a full scan of orders joined to
// customers, grouped and sorted. There is deliberately no index that would
// make it cheap, as with the reporting queries that get cached in real life.
const revenueQuery = `
SELECT c.segment,
       COUNT(*)                      AS orders,
       SUM(o.amount_cents)           AS revenue_cents,
       AVG(o.amount_cents)           AS avg_cents,
       MAX(o.amount_cents)           AS max_cents
FROM orders o
JOIN customers c ON c.id = o.customer_id
WHERE o.status = 'paid'
  AND o.placed_at >= 1735689600
GROUP BY c.segment
ORDER BY revenue_cents DESC`

// Segment is one row of the answer. Its fields are exported so that the
// cache's codec (msgpack) can store it.
type Segment struct {
	Name         string
	Orders       int64
	RevenueCents int64
	AvgCents     float64
	MaxCents     int64
}

// createShop creates the database file at path with the given number of
// orders.
func createShop(ctx context.Context, path string, orders int) error {
	db, err := sql.Open("sqlite", dsn(path, false))
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // pragmas are per connection
	customers := max(orders/20, 1)
	for _, stmt := range []struct {
		q    string
		args []any
	}{
		{"PRAGMA journal_mode = OFF", nil}, // a throwaway file: no journal, no fsync
		{"PRAGMA synchronous = OFF", nil},
		{schema, nil},
		{fill, []any{customers, orders}},
	} {
		if _, err := db.ExecContext(ctx, stmt.q, stmt.args...); err != nil {
			return fmt.Errorf("create shop: %w", err)
		}
	}
	return nil
}

// openShop opens the database read-only, as the workers do.
func openShop(path string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", dsn(path, true))
	if err != nil {
		return nil, err
	}
	if err := db.Ping(); err != nil {
		db.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return db, nil
}

func dsn(path string, readOnly bool) string {
	s := "file:" + filepath.ToSlash(path)
	if readOnly {
		s += "?mode=ro"
	}
	return s
}

// revenueBySegment runs the expensive query.
func revenueBySegment(ctx context.Context, db *sql.DB) ([]Segment, error) {
	rows, err := db.QueryContext(ctx, revenueQuery)
	if err != nil {
		return nil, fmt.Errorf("revenue query: %w", err)
	}
	defer rows.Close()
	var out []Segment
	for rows.Next() {
		var s Segment
		if err := rows.Scan(&s.Name, &s.Orders, &s.RevenueCents, &s.AvgCents, &s.MaxCents); err != nil {
			return nil, fmt.Errorf("revenue query: %w", err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("revenue query: %w", err)
	}
	return out, nil
}

// digest identifies an answer, so that the parent can check that every
// request, cached or not, got the same one.
func digest(segs []Segment) string {
	b, _ := json.Marshal(segs) // plain structs: cannot fail
	h := fnv.New64a()
	h.Write(b)
	return fmt.Sprintf("%016x", h.Sum64())
}

// timeQuery runs the query once and says how long it took.
func timeQuery(ctx context.Context, db *sql.DB) ([]Segment, time.Duration, error) {
	start := time.Now()
	segs, err := revenueBySegment(ctx, db)
	return segs, time.Since(start), err
}
