package main

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

	"github.com/kahunago/kahuna/fence/sqlfence"
)

// store is the value both workers write: one row per run of the scenario.
type store struct {
	db    *sql.DB
	d     sqlfence.Dialect
	fence *sqlfence.Fence
}

// openStore opens dsn: postgres://… with pgx, anything else as a SQLite
// file name.
func openStore(ctx context.Context, dsn string) (*store, error) {
	driver, d := "sqlite", sqlfence.SQLite
	source := "file:" + dsn + "?_pragma=busy_timeout(10000)&_txlock=immediate"
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		driver, d, source = "pgx", sqlfence.PostgreSQL, dsn
	}
	db, err := sql.Open(driver, source)
	if err != nil {
		return nil, fmt.Errorf("opening the database: %w", err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS gcpause_value (id INTEGER PRIMARY KEY, v INTEGER NOT NULL)"); err != nil {
		db.Close()
		return nil, fmt.Errorf("creating the value table: %w", err)
	}
	f, err := sqlfence.New(ctx, db, d, "gcpause_fence")
	if err != nil {
		db.Close()
		return nil, err
	}
	return &store{db: db, d: d, fence: f}, nil
}

func (s *store) close() { s.db.Close() }

// q writes $n parameters in the dialect's form.
func (s *store) q(query string) string {
	if s.d == sqlfence.SQLite {
		return strings.ReplaceAll(query, "$", "?")
	}
	return query
}

// reset sets row id to 0 and forgets the marks of resource, so a run
// starts afresh on a database kept from an earlier one.
func (s *store) reset(ctx context.Context, id int, resource string) error {
	for _, st := range []struct {
		query string
		args  []any
	}{
		{"DELETE FROM gcpause_value WHERE id = $1", []any{id}},
		{"INSERT INTO gcpause_value (id, v) VALUES ($1, 0)", []any{id}},
		{`DELETE FROM "gcpause_fence" WHERE resource = $1`, []any{resource}},
	} {
		if _, err := s.db.ExecContext(ctx, s.q(st.query), st.args...); err != nil {
			return fmt.Errorf("resetting the value: %w", err)
		}
	}
	return nil
}

func (s *store) read(ctx context.Context, id int) (int, error) {
	var v int
	if err := s.db.QueryRowContext(ctx, s.q("SELECT v FROM gcpause_value WHERE id = $1"), id).Scan(&v); err != nil {
		return 0, fmt.Errorf("reading the value: %w", err)
	}
	return v, nil
}

// write sets the value, plainly or fenced.
func (s *store) write(ctx context.Context, id, v int, fenced bool, resource string, token int64) error {
	update := s.q("UPDATE gcpause_value SET v = $1 WHERE id = $2")
	if !fenced {
		_, err := s.db.ExecContext(ctx, update, v, id)
		return err
	}
	tok, err := fenceToken(resource, token)
	if err != nil {
		return err
	}
	_, err = s.fence.Exec(ctx, resource, tok, update, v, id)
	return err
}
