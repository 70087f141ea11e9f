package sqlfence_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

	"github.com/kahunago/kahuna/fence/internal/pgtest"
	"github.com/kahunago/kahuna/fence/sqlfence"
)

// pgDSN reaches the cluster TestMain started; "" when the machine has no
// PostgreSQL binaries.
var pgDSN string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if pgtest.BinDir() == "" {
		if os.Getenv("FENCE_REQUIRE_PG") != "" {
			fmt.Fprintln(os.Stderr, "sqlfence: FENCE_REQUIRE_PG is set and there are no PostgreSQL binaries (looked in $FENCE_PG_BIN, /usr/lib/postgresql/*/bin, $PATH)")
			return 1
		}
		fmt.Fprintln(os.Stderr, "sqlfence: no PostgreSQL binaries (looked in $FENCE_PG_BIN, /usr/lib/postgresql/*/bin, $PATH): PostgreSQL tests will skip")
		return m.Run()
	}
	srv, err := pgtest.Start(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := srv.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}()
	pgDSN = srv.DSN
	return m.Run()
}

type backend struct {
	name string
	db   *sql.DB
	d    sqlfence.Dialect
}

var tableSeq atomic.Int64

// names returns n table names no other test uses.
func names(n int) []string {
	var out []string
	for range n {
		out = append(out, "t"+strconv.FormatInt(tableSeq.Add(1), 10))
	}
	return out
}

func openSQLite(t testing.TB) *sql.DB {
	path := filepath.Join(t.TempDir(), "fence.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func openPostgres(t testing.TB) *sql.DB {
	if pgDSN == "" {
		t.Skip("no PostgreSQL binaries on this machine (set FENCE_PG_BIN to a directory with initdb and pg_ctl)")
	}
	db, err := sql.Open("pgx", pgDSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// eachDB runs f on SQLite and on PostgreSQL, as subtests.
func eachDB(t *testing.T, f func(t *testing.T, b backend)) {
	t.Run("SQLite", func(t *testing.T) { f(t, backend{"SQLite", openSQLite(t), sqlfence.SQLite}) })
	t.Run("PostgreSQL", func(t *testing.T) { f(t, backend{"PostgreSQL", openPostgres(t), sqlfence.PostgreSQL}) })
}

// p rewrites $n parameters for the dialect.
func (b backend) p(query string) string {
	if b.d == sqlfence.SQLite {
		return strings.ReplaceAll(query, "$", "?")
	}
	return query
}

func (b backend) exec(t testing.TB, query string, args ...any) {
	t.Helper()
	if _, err := b.db.Exec(b.p(query), args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// tables lists the tables of the database, to see that nothing was created.
func (b backend) tables(t testing.TB) []string {
	t.Helper()
	q := "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
	if b.d == sqlfence.PostgreSQL {
		q = "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename"
	}
	rows, err := b.db.Query(q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		out = append(out, n)
	}
	return out
}

// history reads the value's history column: the tokens that landed, in the
// order their updates landed on the row.
func (b backend) history(t testing.TB, table string) []uint64 {
	t.Helper()
	var h string
	if err := b.db.QueryRow("SELECT history FROM " + table + " WHERE id = 1").Scan(&h); err != nil {
		t.Fatal(err)
	}
	var out []uint64
	for _, f := range strings.Split(h, ",") {
		if f == "" {
			continue
		}
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			t.Fatalf("history %q: %v", h, err)
		}
		out = append(out, v)
	}
	return out
}
