package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/kahunago/kahuna/fence"
	"github.com/kahunago/kahuna/fence/internal/fencetest"
	"github.com/kahunago/kahuna/fence/sqlfence"
)

// setup makes a mark table and a value table with one row, id 1.
func setup(t *testing.T, b backend) (*sqlfence.Fence, string) {
	f, _, val := setupNamed(t, b)
	return f, val
}

// setupNamed is setup, also returning the mark table's name.
func setupNamed(t *testing.T, b backend) (f *sqlfence.Fence, marks, val string) {
	t.Helper()
	n := names(2)
	f, err := sqlfence.New(context.Background(), b.db, b.d, n[0])
	if err != nil {
		t.Fatal(err)
	}
	b.exec(t, "CREATE TABLE "+n[1]+" (id INTEGER PRIMARY KEY, v TEXT NOT NULL, history TEXT NOT NULL, tok BIGINT)")
	b.exec(t, "INSERT INTO "+n[1]+" (id, v, history) VALUES (1, '', '')")
	return f, n[0], n[1]
}

func tok(v uint64) fence.Token { return fence.Token{Lock: "orders/42", Value: v} }

func (b backend) value(t *testing.T, table string) string {
	t.Helper()
	var v string
	if err := b.db.QueryRow("SELECT v FROM " + table + " WHERE id = 1").Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestRule(t *testing.T) {
	eachDB(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		f, marks, val := setupNamed(t, b)
		set := b.p("UPDATE " + val + " SET v = $1 WHERE id = 1")
		for _, step := range []struct {
			tok     uint64
			v       string
			current uint64 // the winning token when stale, else 0
		}{
			{0, "first grant", 0}, // the first grant's token is 0
			{5, "a", 0},
			{5, "a again", 0}, // the holder's own second write
			{6, "b", 0},
			{4, "stale", 6},
			{5, "stale too", 6},
			{6, "b again", 0},
		} {
			_, err := f.Exec(ctx, "orders", tok(step.tok), set, step.v)
			if step.current == 0 {
				if err != nil {
					t.Fatalf("token %d: %v", step.tok, err)
				}
				if got := b.value(t, val); got != step.v {
					t.Fatalf("token %d: value %q, want %q", step.tok, got, step.v)
				}
				continue
			}
			var stale *fence.StaleError
			if !errors.As(err, &stale) || stale.Current != step.current || stale.Token != tok(step.tok) || stale.Resource != "orders" {
				t.Fatalf("token %d: %v, want stale with current %d", step.tok, err, step.current)
			}
			if got := b.value(t, val); got == step.v {
				t.Fatalf("token %d: the stale write landed", step.tok)
			}
		}
		// Another resource, lock or slot has a mark of its own.
		for _, k := range []struct {
			res string
			tok fence.Token
		}{{"other", tok(1)}, {"orders", fence.Token{Lock: "other", Value: 1}}, {"orders", fence.Token{Lock: "orders/42", Slot: "read", Value: 1}}} {
			if _, err := f.Exec(ctx, k.res, k.tok, set, "x"); err != nil {
				t.Fatalf("%s %v: %v", k.res, k.tok, err)
			}
		}
		if m, ok, err := f.Mark(ctx, "orders", "orders/42", ""); err != nil || !ok || m != 6 {
			t.Fatalf("mark %d %v %v, want 6", m, ok, err)
		}
		if _, ok, err := f.Mark(ctx, "never", "orders/42", ""); err != nil || ok {
			t.Fatalf("mark of a key never written: %v %v", ok, err)
		}
		// New on an existing table keeps its marks.
		f2, err := sqlfence.New(ctx, b.db, b.d, marks)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f2.Exec(ctx, "orders", tok(5), set, "stale"); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("token 5 through a second Fence on the table: %v", err)
		}
	})
}

func TestBadTableName(t *testing.T) {
	eachDB(t, func(t *testing.T, b backend) {
		before := b.tables(t)
		for _, name := range []string{"", "marks; DROP TABLE x", `marks"`, "1marks", "a.b.c", "a..b", "marks-1", strings.Repeat("m", 64), "märks"} {
			_, err := sqlfence.New(context.Background(), b.db, b.d, name)
			if !errors.Is(err, sqlfence.ErrIdentifier) || !strings.Contains(err.Error(), "not an identifier") {
				t.Errorf("New(%q): %v, want ErrIdentifier", name, err)
			}
			if _, err := sqlfence.NewRow(b.d, "t", name, "tok"); !errors.Is(err, sqlfence.ErrIdentifier) {
				t.Errorf("NewRow(column %q): %v, want ErrIdentifier", name, err)
			}
		}
		if after := b.tables(t); !slices.Equal(before, after) {
			t.Fatalf("tables %v after bad names, were %v", after, before)
		}
		if _, err := sqlfence.New(context.Background(), b.db, sqlfence.Dialect{}, "marks"); err == nil {
			t.Fatal("New with no dialect: no error")
		}
	})
}

func TestInvalidTokenWritesNothing(t *testing.T) {
	eachDB(t, func(t *testing.T, b backend) {
		f, val := setup(t, b)
		for _, bad := range []fence.Token{{Value: 1}, {Lock: strings.Repeat("x", fence.MaxNameLen+1)}, {Lock: "l", Value: fence.MaxValue + 1}} {
			err := f.Do(context.Background(), "orders", bad, func(context.Context, *sql.Tx) error {
				t.Fatal("write ran")
				return nil
			})
			if !errors.Is(err, fence.ErrInvalid) {
				t.Fatalf("%v: %v, want ErrInvalid", bad, err)
			}
		}
		if m, ok, _ := f.Mark(context.Background(), "orders", "", ""); ok {
			t.Fatalf("mark %d set by an invalid token", m)
		}
		if v := b.value(t, val); v != "" {
			t.Fatalf("value %q", v)
		}
	})
}

func TestDatabaseErrorRollsBack(t *testing.T) {
	eachDB(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		f, val := setup(t, b)
		if _, err := f.Exec(ctx, "orders", tok(3), b.p("UPDATE "+val+" SET v = $1 WHERE id = 1"), "kept"); err != nil {
			t.Fatal(err)
		}
		boom := errors.New("handler failed")
		for _, fail := range []struct {
			name  string
			write func(ctx context.Context, tx *sql.Tx) error
			is    error
		}{
			{"bad SQL", func(ctx context.Context, tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, "UPDATE no_such_table SET v = 1")
				return err
			}, nil},
			{"constraint", func(ctx context.Context, tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, "INSERT INTO "+val+" (id, v, history) VALUES (1, 'dup', '')")
				return err
			}, nil},
			{"write's own error", func(context.Context, *sql.Tx) error { return boom }, boom},
		} {
			err := f.Do(ctx, "orders", tok(9), func(ctx context.Context, tx *sql.Tx) error {
				if _, err := tx.ExecContext(ctx, b.p("UPDATE "+val+" SET v = $1 WHERE id = 1"), "rolled back"); err != nil {
					return err
				}
				return fail.write(ctx, tx)
			})
			if err == nil || errors.Is(err, fence.ErrStale) || !strings.Contains(err.Error(), `sqlfence: resource "orders": fenced write with "orders/42" token 9`) {
				t.Fatalf("%s: %v, want a wrapped error, not stale", fail.name, err)
			}
			if fail.is != nil && !errors.Is(err, fail.is) {
				t.Fatalf("%s: %v does not wrap %v", fail.name, err, fail.is)
			}
			if v := b.value(t, val); v != "kept" {
				t.Fatalf("%s: value %q, want the write rolled back", fail.name, v)
			}
			if m, _, _ := f.Mark(ctx, "orders", "orders/42", ""); m != 3 {
				t.Fatalf("%s: mark %d, want 3: the raise was not rolled back", fail.name, m)
			}
		}
		// A cancelled context is a failure too, not stale.
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := f.Exec(cctx, "orders", tok(1), "SELECT 1"); err == nil || errors.Is(err, fence.ErrStale) {
			t.Fatalf("cancelled: %v", err)
		}
	})
}

func TestStore(t *testing.T) {
	eachDB(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		f, val := setup(t, b)
		var s fence.Store = f
		write := func(v string) func(ctx context.Context) error {
			return func(ctx context.Context) error {
				tx, ok := sqlfence.TxFrom(ctx)
				if !ok {
					return errors.New("no transaction in ctx")
				}
				_, err := tx.ExecContext(ctx, b.p("UPDATE "+val+" SET v = $1 WHERE id = 1"), v)
				return err
			}
		}
		if err := s.Fence(ctx, "orders", tok(2), write("two")); err != nil {
			t.Fatal(err)
		}
		if err := s.Fence(ctx, "orders", tok(1), write("one")); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("token 1 after 2: %v", err)
		}
		if v := b.value(t, val); v != "two" {
			t.Fatalf("value %q", v)
		}
		if _, ok := sqlfence.TxFrom(ctx); ok {
			t.Fatal("TxFrom found a transaction outside Fence")
		}
	})
}

// TestConcurrentWriters: 16 writers with interleaved tokens append their
// token to one row's history, each in a fenced transaction. The history is
// the order the writes landed on the row (each UPDATE appends to the row's
// last committed version), so it must never go down.
func TestConcurrentWriters(t *testing.T) {
	eachDB(t, func(t *testing.T, b backend) {
		f, val := setup(t, b)
		b.db.SetMaxOpenConns(32)
		appendTok := b.p("UPDATE " + val + " SET history = history || $1 WHERE id = 1")
		out := fencetest.Hammer(context.Background(), 16, 40, 7, func(ctx context.Context, v uint64) error {
			_, err := f.Exec(ctx, "value", tok(v), appendTok, fmt.Sprintf(",%d", v))
			return err
		})
		fencetest.Check(t, b.history(t, val), out)
	})
}
