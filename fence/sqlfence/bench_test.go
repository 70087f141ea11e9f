package sqlfence_test

import (
	"context"
	"database/sql"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/kahunago/kahuna/fence/sqlfence"
)

// writers is the number of concurrent writers of the benchmarks.
const writers = 16

// BenchmarkPostgresUpdate16 measures one single-row UPDATE on PostgreSQL
// by 16 concurrent writers, side by side: plain (autocommit), fenced by the
// side table (Fence.Exec: BEGIN, the upsert, the UPDATE, COMMIT) and
// fenced by a token column of the row (Row.Update: the one UPDATE). All
// writers carry the same token, so every write lands, as every plain one
// does. ns/op is wall time over all writes; roundtrips/op counts the
// client's writes to the server socket per update.
func BenchmarkPostgresUpdate16(b *testing.B) {
	db, trips := openCountingPostgres(b)
	n := names(2)
	ctx := context.Background()
	f, err := sqlfence.New(ctx, db, sqlfence.PostgreSQL, n[0])
	if err != nil {
		b.Fatal(err)
	}
	val := n[1]
	for _, q := range []string{
		"CREATE TABLE " + val + " (id INTEGER PRIMARY KEY, v BIGINT NOT NULL, tok BIGINT)",
		"INSERT INTO " + val + " (id, v) VALUES (1, 0)",
	} {
		if _, err := db.Exec(q); err != nil {
			b.Fatal(err)
		}
	}
	r, err := sqlfence.NewRow(sqlfence.PostgreSQL, val, "id", "tok")
	if err != nil {
		b.Fatal(err)
	}
	update := "UPDATE " + val + " SET v = v + 1 WHERE id = 1"
	for _, bc := range []struct {
		name string
		op   func(ctx context.Context) error
	}{
		{"plain", func(ctx context.Context) error { _, err := db.ExecContext(ctx, update); return err }},
		{"plain-tx", func(ctx context.Context) error { return inTx(ctx, db, update) }},
		{"fenced", func(ctx context.Context) error { _, err := f.Exec(ctx, "bench", tok(7), update); return err }},
		{"fenced-1stmt", func(ctx context.Context) error {
			_, err := f.Update(ctx, db, "bench", tok(7), val, "v = v + 1", "id = 1")
			return err
		}},
		{"row", func(ctx context.Context) error { return r.Update(ctx, db, 1, tok(7), "v = v + 1") }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			// Warm every connection (and pgx's statement cache) before timing.
			parallel(b, writers, writers*4, bc.op)
			trips.Store(0)
			b.ResetTimer()
			parallel(b, writers, b.N, bc.op)
			b.StopTimer()
			b.ReportMetric(float64(trips.Load())/float64(b.N), "roundtrips/op")
		})
	}
}

func inTx(ctx context.Context, db *sql.DB, query string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, query); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// parallel runs n calls of op on w goroutines.
func parallel(b *testing.B, w, n int, op func(ctx context.Context) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range w {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				if err := op(context.Background()); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// openCountingPostgres opens the test cluster with a pool of writers
// connections, all kept open, counting the client's socket writes.
func openCountingPostgres(b *testing.B) (*sql.DB, *atomic.Int64) {
	if pgDSN == "" {
		b.Skip("no PostgreSQL binaries on this machine (set FENCE_PG_BIN to a directory with initdb and pg_ctl)")
	}
	cfg, err := pgx.ParseConfig(pgDSN)
	if err != nil {
		b.Fatal(err)
	}
	trips := new(atomic.Int64)
	dial := cfg.DialFunc
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{c, trips}, nil
	}
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(writers)
	db.SetMaxIdleConns(writers)
	b.Cleanup(func() { db.Close() })
	return db, trips
}

type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}
