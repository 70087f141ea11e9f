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

func TestRowRule(t *testing.T) {
	eachDB(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		_, val := setup(t, b)
		r, err := sqlfence.NewRow(b.d, val, "id", "tok")
		if err != nil {
			t.Fatal(err)
		}
		set := b.p("v = $1")
		for _, step := range []struct {
			tok     uint64
			v       string
			current uint64
		}{
			{0, "first", 0}, // NULL token: no mark yet
			{2, "a", 0},
			{2, "a again", 0},
			{1, "stale", 2},
			{3, "b", 0},
		} {
			err := r.Update(ctx, b.db, 1, tok(step.tok), set, step.v)
			if step.current == 0 {
				if err != nil {
					t.Fatalf("token %d: %v", step.tok, err)
				}
				if got := b.value(t, val); got != step.v {
					t.Fatalf("token %d: value %q", step.tok, got)
				}
				continue
			}
			var stale *fence.StaleError
			if !errors.As(err, &stale) || stale.Current != step.current {
				t.Fatalf("token %d: %v, want stale with current %d", step.tok, err, step.current)
			}
		}
		if err := r.Update(ctx, b.db, 2, tok(9), set, "x"); !errors.Is(err, sqlfence.ErrNoRow) || errors.Is(err, fence.ErrStale) {
			t.Fatalf("missing row: %v, want ErrNoRow", err)
		}
		if err := r.Update(ctx, b.db, 1, tok(9), "no_such_column = 1"); err == nil || errors.Is(err, fence.ErrStale) {
			t.Fatalf("bad SQL: %v, want a database error, not stale", err)
		}
		if err := r.Update(ctx, b.db, 1, fence.Token{Value: 9}, set, "x"); !errors.Is(err, fence.ErrInvalid) {
			t.Fatalf("invalid token: %v", err)
		}
		if got := b.value(t, val); got != "b" {
			t.Fatalf("value %q after refused updates, want b", got)
		}
	})
}

func TestRowConcurrentWriters(t *testing.T) {
	eachDB(t, func(t *testing.T, b backend) {
		_, val := setup(t, b)
		r, err := sqlfence.NewRow(b.d, val, "id", "tok")
		if err != nil {
			t.Fatal(err)
		}
		b.db.SetMaxOpenConns(32)
		set := b.p("history = history || $1")
		out := fencetest.Hammer(context.Background(), 16, 40, 11, func(ctx context.Context, v uint64) error {
			return r.Update(ctx, b.db, 1, tok(v), set, fmt.Sprintf(",%d", v))
		})
		fencetest.Check(t, b.history(t, val), out)
	})
}
