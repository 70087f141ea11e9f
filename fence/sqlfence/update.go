package sqlfence

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/kahunago/kahuna/fence"
)

// Update is Exec of one UPDATE in a single statement, for PostgreSQL (SQLite
// has no data-modifying WITH and gets errors.ErrUnsupported):
//
//	WITH kahuna_fence AS (<the upsert of the mark> RETURNING mark AS kahuna_mark),
//	     kahuna_update AS (UPDATE table SET <set> FROM kahuna_fence WHERE <where> RETURNING 1)
//	SELECT (SELECT count(*) FROM kahuna_fence), (SELECT count(*) FROM kahuna_update)
//
// The UPDATE joins the upsert's result, so it changes rows only when the
// fence holds, and the statement is one transaction (or part of q's, when
// q is a *sql.Tx): one round trip instead of Do's four. set and where are
// the caller's SQL with parameters $1 to $n (args); table is checked as in
// New. It returns the number of rows updated; a stale tok is a
// *fence.StaleError (its mark read by a second statement, only then).
func (f *Fence) Update(ctx context.Context, q Execer, resource string, tok fence.Token, table, set, where string, args ...any) (int64, error) {
	if f.d != PostgreSQL {
		return 0, fmt.Errorf("sqlfence: single-statement Update on %s: %w", f.d, errors.ErrUnsupported)
	}
	if err := tok.Validate(); err != nil {
		return 0, err
	}
	qt, err := quoteIdent(table)
	if err != nil {
		return 0, err
	}
	n := len(args)
	stmt := fmt.Sprintf(`WITH kahuna_fence AS (%s),
kahuna_update AS (UPDATE %s SET %s FROM kahuna_fence WHERE %s RETURNING 1)
SELECT (SELECT count(*) FROM kahuna_fence), (SELECT count(*) FROM kahuna_update)`,
		f.upsertFrom(n+1), qt, set, where)
	var fenced, updated int64
	err = q.QueryRowContext(ctx, stmt, slices.Concat(args, []any{resource, tok.Lock, tok.Slot, int64(tok.Value)})...).Scan(&fenced, &updated)
	if err != nil {
		return 0, fmt.Errorf("sqlfence: resource %q: fenced update of %s with %s: %w", resource, table, tok, err)
	}
	if fenced == 0 {
		var mark int64
		if err := q.QueryRowContext(ctx, f.getMark, resource, tok.Lock, tok.Slot).Scan(&mark); err != nil {
			return 0, fmt.Errorf("sqlfence: resource %q: reading the mark above %s: %w", resource, tok, err)
		}
		return 0, &fence.StaleError{Resource: resource, Token: tok, Current: uint64(mark)}
	}
	return updated, nil
}
