package sqlfence_test

import (
	"context"
	"database/sql"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/kahunago/kahuna/fence/sqlfence"
)

// writers is the number of concurrent writers of the benchmarks.
const writers = 16

// BenchmarkPostgresUpdate16 measures one single-row UPDATE on PostgreSQL
// by 16 concurrent writers, side by side: plain (autocommit), plain in a
// transaction of its own (BEGIN, the UPDATE, COMMIT), fenced by the side
// table (Fence.Exec: BEGIN, the upsert, the UPDATE, COMMIT), fenced by the
// side table in one statement (Fence.Update) and fenced by a token column
// of the row (Row.Update: the one UPDATE). Each case has fresh tables, so
// none inherits the dead row versions of the one before. All writers carry
// the same token, so every write lands, as every plain one does. ns/op is
// wall time over all writes; roundtrips/op counts the client's writes to
// the server socket per update.
func BenchmarkPostgresUpdate16(b *testing.B) {
	db, trips := openCountingPostgres(b)
	ctx := context.Background()
	for _, bc := range updateCases(db) {
		b.Run(bc.name, func(b *testing.B) {
			t := freshTables(ctx, b, db)
			op := func(ctx context.Context) error { return bc.op(ctx, t) }
			// Warm every connection (and pgx's statement cache) before timing.
			parallel(b, writers, writers*4, op)
			trips.Store(0)
			b.ResetTimer()
			parallel(b, writers, b.N, op)
			b.StopTimer()
			b.ReportMetric(float64(trips.Load())/float64(b.N), "roundtrips/op")
		})
	}
}

type tables struct {
	f      *sqlfence.Fence
	r      *sqlfence.Row
	val    string
	update string
}

// freshTables makes a mark table and a value table of one row for a case.
func freshTables(ctx context.Context, b *testing.B, db *sql.DB) tables {
	n := names(2)
	f, err := sqlfence.New(ctx, db, sqlfence.PostgreSQL, n[0])
	if err != nil {
		b.Fatal(err)
	}
	for _, q := range []string{
		"CREATE TABLE " + n[1] + " (id INTEGER PRIMARY KEY, v BIGINT NOT NULL, tok BIGINT)",
		"INSERT INTO " + n[1] + " (id, v) VALUES (1, 0)",
	} {
		if _, err := db.Exec(q); err != nil {
			b.Fatal(err)
		}
	}
	r, err := sqlfence.NewRow(sqlfence.PostgreSQL, n[1], "id", "tok")
	if err != nil {
		b.Fatal(err)
	}
	return tables{f, r, n[1], "UPDATE " + n[1] + " SET v = v + 1 WHERE id = 1"}
}

type updateCase struct {
	name string
	op   func(ctx context.Context, t tables) error
}

func updateCases(db *sql.DB) []updateCase {
	return []updateCase{
		{"plain", func(ctx context.Context, t tables) error { _, err := db.ExecContext(ctx, t.update); return err }},
		{"plain-tx", func(ctx context.Context, t tables) error { return inTx(ctx, db, t.update) }},
		{"fenced", func(ctx context.Context, t tables) error {
			_, err := t.f.Exec(ctx, "bench", tok(7), t.update)
			return err
		}},
		{"fenced-1stmt", func(ctx context.Context, t tables) error {
			_, err := t.f.Update(ctx, db, "bench", tok(7), t.val, "v = v + 1", "id = 1")
			return err
		}},
		{"row", func(ctx context.Context, t tables) error { return t.r.Update(ctx, db, 1, tok(7), "v = v + 1") }},
	}
}

// BenchmarkPostgresUpdate16Rounds runs the cases of
// BenchmarkPostgresUpdate16 interleaved: each of b.N rounds runs 480
// updates of every case, in an order rotated each round, so load from
// elsewhere on the machine falls on all of them alike. It reports each
// case's ns per update and its ratio to plain; its own ns/op is the time
// of a round.
func BenchmarkPostgresUpdate16Rounds(b *testing.B) {
	db, _ := openCountingPostgres(b)
	ctx := context.Background()
	cases := updateCases(db)
	ts := make([]tables, len(cases))
	for i, c := range cases {
		ts[i] = freshTables(ctx, b, db)
		parallel(b, writers, writers*4, func(ctx context.Context) error { return c.op(ctx, ts[i]) })
	}
	const perRound = writers * 30
	spent := make([]time.Duration, len(cases))
	b.ResetTimer()
	for round := range b.N {
		for k := range cases {
			i := (k + round) % len(cases)
			start := time.Now()
			parallel(b, writers, perRound, func(ctx context.Context) error { return cases[i].op(ctx, ts[i]) })
			spent[i] += time.Since(start)
		}
	}
	b.StopTimer()
	for i, c := range cases {
		per := float64(spent[i].Nanoseconds()) / float64(b.N*perRound)
		b.ReportMetric(per, c.name+"-ns/update")
		if i > 0 {
			b.ReportMetric(float64(spent[i])/float64(spent[0]), c.name+"/plain")
		}
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
