package sqlfence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"

	"github.com/kahunago/kahuna/fence"
)

// Execer is what Row needs of a *sql.DB, *sql.Conn or *sql.Tx.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Row fences UPDATEs of the caller's own rows on a token column of those
// rows: the condition and the raise are in the UPDATE itself, one
// statement, so the fence costs no statement of its own. The column keeps
// the mark of whichever lock guards the row; tokens of two locks must not
// meet in one column. NULL counts as no mark.
//
// Row cannot fence an INSERT of a row that does not exist yet (Update
// returns ErrNoRow): use Fence for that.
type Row struct {
	d                 Dialect
	table, key, token string
	getMark           string
}

// ErrNoRow is matched (errors.Is) by Update's error when no row has the key.
var ErrNoRow = errors.New("sqlfence: no row with that key")

// NewRow checks the table and column names (plain identifiers, see New);
// an invalid one is an error matching ErrIdentifier.
func NewRow(d Dialect, table, keyColumn, tokenColumn string) (*Row, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	r := &Row{d: d}
	for _, n := range []struct {
		dst  *string
		name string
	}{{&r.table, table}, {&r.key, keyColumn}, {&r.token, tokenColumn}} {
		q, err := quoteIdent(n.name)
		if err != nil {
			return nil, err
		}
		*n.dst = q
	}
	r.getMark = fmt.Sprintf("SELECT %s FROM %s WHERE %s = %s", r.token, r.table, r.key, d.param(1))
	return r, nil
}

// Update runs, on q,
//
//	UPDATE table SET <set>, token = tok WHERE key = <key> AND (token IS NULL OR token <= tok)
//
// where set is the caller's assignments, with the parameters args in the
// dialect's form numbered from 1 ($1, $2 for PostgreSQL; ?1 or ? for
// SQLite). No row updated means stale (a *fence.StaleError with the row's
// token, read after the UPDATE) or no such row (ErrNoRow). A database error
// is returned wrapped, never as stale.
func (r *Row) Update(ctx context.Context, q Execer, key any, tok fence.Token, set string, args ...any) error {
	if err := tok.Validate(); err != nil {
		return err
	}
	n := len(args)
	t, k := r.d.param(n+1), r.d.param(n+2)
	stmt := fmt.Sprintf("UPDATE %s SET %s, %s = %s WHERE %s = %s AND (%s IS NULL OR %s <= %s)",
		r.table, set, r.token, t, r.key, k, r.token, r.token, t)
	res, err := q.ExecContext(ctx, stmt, slices.Concat(args, []any{int64(tok.Value), key})...)
	if err != nil {
		return fmt.Errorf("sqlfence: fenced update of %s with %s: %w", r.table, tok, err)
	}
	rows, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("sqlfence: fenced update of %s with %s: rows affected: %w", r.table, tok, err)
	}
	if rows > 0 {
		return nil
	}
	// The decision is made; this read only says why, and which token won.
	var mark sql.NullInt64
	err = q.QueryRowContext(ctx, r.getMark, key).Scan(&mark)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("sqlfence: fenced update of %s with %s: %w", r.table, tok, ErrNoRow)
	}
	if err != nil {
		return fmt.Errorf("sqlfence: fenced update of %s with %s: reading the row's token: %w", r.table, tok, err)
	}
	if !mark.Valid || uint64(mark.Int64) <= tok.Value {
		// Only a writer that lowers or clears the token column gets here.
		return fmt.Errorf("sqlfence: fenced update of %s with %s: no row updated, yet the row's token (%d, null %v) is not above it: it was lowered", r.table, tok, mark.Int64, !mark.Valid)
	}
	return &fence.StaleError{Resource: r.table, Token: tok, Current: uint64(mark.Int64)}
}
