package sqlfence_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/kahunago/kahuna/fence"
	"github.com/kahunago/kahuna/fence/internal/fencetest"
	"github.com/kahunago/kahuna/fence/sqlfence"
)

func TestUpdateOneStatement(t *testing.T) {
	b := backend{"PostgreSQL", openPostgres(t), sqlfence.PostgreSQL}
	ctx := context.Background()
	f, val := setup(t, b)
	// A column named like the mark's must not clash with it.
	b.exec(t, "ALTER TABLE "+val+" ADD COLUMN mark TEXT")
	for _, step := range []struct {
		tok     uint64
		v       string
		current uint64
	}{{3, "a", 0}, {3, "a again", 0}, {2, "stale", 3}, {4, "b", 0}} {
		n, err := f.Update(ctx, b.db, "orders", tok(step.tok), val, "v = $1, mark = $1", "id = $2 AND (mark IS NULL OR mark <> 'never')", step.v, 1)
		if step.current == 0 {
			if err != nil || n != 1 || b.value(t, val) != step.v {
				t.Fatalf("token %d: %d %v, value %q", step.tok, n, err, b.value(t, val))
			}
			continue
		}
		var stale *fence.StaleError
		if !errors.As(err, &stale) || stale.Current != step.current || n != 0 {
			t.Fatalf("token %d: %d %v, want stale with current %d", step.tok, n, err, step.current)
		}
	}
	// No row matched: the fence held, nothing updated, the mark raised.
	if n, err := f.Update(ctx, b.db, "orders", tok(5), val, "v = $1", "id = $2", "x", 99); err != nil || n != 0 {
		t.Fatalf("no row: %d %v", n, err)
	}
	if m, _, _ := f.Mark(ctx, "orders", "orders/42", ""); m != 5 {
		t.Fatalf("mark %d, want 5", m)
	}
	// A database error rolls back the raise and is not stale.
	_, err := f.Update(ctx, b.db, "orders", tok(9), val, "no_such_column = 1", "id = 1")
	if err == nil || errors.Is(err, fence.ErrStale) {
		t.Fatalf("bad SQL: %v", err)
	}
	if m, _, _ := f.Mark(ctx, "orders", "orders/42", ""); m != 5 {
		t.Fatalf("mark %d after a failed statement, want 5", m)
	}
	if _, err := f.Update(ctx, b.db, "orders", tok(9), "t; DROP TABLE x", "v = 1", "true"); !errors.Is(err, sqlfence.ErrIdentifier) {
		t.Fatalf("bad table: %v", err)
	}
}

func TestUpdateOneStatementConcurrent(t *testing.T) {
	b := backend{"PostgreSQL", openPostgres(t), sqlfence.PostgreSQL}
	f, val := setup(t, b)
	b.db.SetMaxOpenConns(32)
	out := fencetest.Hammer(context.Background(), 16, 40, 13, func(ctx context.Context, v uint64) error {
		_, err := f.Update(ctx, b.db, "value", tok(v), val, "history = history || $1", "id = 1", fmt.Sprintf(",%d", v))
		return err
	})
	fencetest.Check(t, b.history(t, val), out)
}

func TestUpdateOneStatementUnsupportedOnSQLite(t *testing.T) {
	b := backend{"SQLite", openSQLite(t), sqlfence.SQLite}
	f, val := setup(t, b)
	if _, err := f.Update(context.Background(), b.db, "orders", tok(1), val, "v = ?1", "id = 1", "x"); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("%v, want ErrUnsupported", err)
	}
}
