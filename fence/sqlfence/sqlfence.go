// Package sqlfence fences writes to a SQL database (database/sql): the
// caller's statements run in one transaction with the raise of the
// high-water mark, kept in a side table, so a stale token rolls the whole
// transaction back and nothing of it lands.
//
// The step, in the transaction, before the caller's statements:
//
//	INSERT INTO marks (resource, lock_name, slot, mark) VALUES (…, tok)
//	ON CONFLICT (resource, lock_name, slot) DO UPDATE SET mark = excluded.mark
//	WHERE marks.mark <= excluded.mark
//	RETURNING mark
//
// A row back means the fence holds and the mark is tok; no row means the
// mark is above tok (stale). Either way the upsert leaves the mark's row
// locked (PostgreSQL locks a conflicting row even when the WHERE fails; SQLite
// holds the database's write lock) until commit or rollback, so no other
// fenced transaction on that key reads or changes the mark in between: the
// check and the caller's write are one step, never a read then a write.
//
// Isolation: the transaction runs at the database's default level. On
// PostgreSQL that is READ COMMITTED, where the upsert of a key another
// fenced transaction holds waits for that transaction to end and is then
// decided against the mark it committed (or left, if it rolled back). That
// is what makes it atomic without SERIALIZABLE. Under REPEATABLE READ or
// SERIALIZABLE the waiting upsert fails with a serialization error instead,
// which is returned wrapped (not as stale): retry it.
//
// SQLite: open the database with a busy timeout and immediate transactions
// (modernc.org/sqlite: "file:x.db?_pragma=busy_timeout(10000)&_txlock=immediate"),
// or concurrent writers fail with SQLITE_BUSY instead of queueing.
//
// Two ways to fence one UPDATE in one statement: Row, on a token column of
// the caller's own row (no side table), and Fence.Update, the upsert and
// the UPDATE in one PostgreSQL statement.
package sqlfence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/kahunago/kahuna/fence"
)

// Dialect is what differs between the databases sqlfence supports: bind
// parameters ($1 in PostgreSQL, ?1 in SQLite, numbered in both so a
// statement can use one twice) and, for SQLite, the oldest version with
// upsert and RETURNING (3.35.0), which New checks.
type Dialect struct{ kind int }

var (
	// PostgreSQL (9.5 or later): $n parameters.
	PostgreSQL = Dialect{1}
	// SQLite 3.35.0 or later (upsert and RETURNING): ?n parameters.
	SQLite = Dialect{2}
)

const minSQLite = "3.35.0"

func (d Dialect) String() string {
	switch d {
	case PostgreSQL:
		return "PostgreSQL"
	case SQLite:
		return "SQLite"
	}
	return "no dialect"
}

// param is the i-th bind parameter, from 1.
func (d Dialect) param(i int) string {
	if d == SQLite {
		return fmt.Sprintf("?%d", i)
	}
	return fmt.Sprintf("$%d", i)
}

func (d Dialect) check() error {
	if d != PostgreSQL && d != SQLite {
		return errors.New("sqlfence: no dialect (use sqlfence.PostgreSQL or sqlfence.SQLite)")
	}
	return nil
}

// ErrIdentifier is matched (errors.Is) by the error for a table or column
// name that is not a plain SQL identifier.
var ErrIdentifier = errors.New("sqlfence: not an identifier")

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// quoteIdent checks name, a plain identifier or schema.identifier (letters,
// digits and underscores, not starting with a digit, at most 63 bytes a
// part), and quotes it. Nothing else is accepted: the name goes into SQL.
func quoteIdent(name string) (string, error) {
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return "", fmt.Errorf("%w: %q has more than one dot", ErrIdentifier, name)
	}
	for i, p := range parts {
		if !identRE.MatchString(p) {
			return "", fmt.Errorf("%w: %q (want letters, digits and _, not starting with a digit, 1 to 63 bytes, optionally schema.name)", ErrIdentifier, name)
		}
		parts[i] = `"` + p + `"`
	}
	return strings.Join(parts, "."), nil
}

// Fence keeps marks in one side table and runs fenced transactions.
type Fence struct {
	db      *sql.DB
	d       Dialect
	table   string
	quoted  string
	upsert  string
	getMark string
}

// New checks table, a plain identifier (optionally schema-qualified), and
// creates it if it does not exist; an invalid name is an error matching
// ErrIdentifier and nothing is created. Call it once per table and process
// (two concurrent CREATE TABLE IF NOT EXISTS can fail on PostgreSQL).
func New(ctx context.Context, db *sql.DB, d Dialect, table string) (*Fence, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	q, err := quoteIdent(table)
	if err != nil {
		return nil, err
	}
	if d == SQLite {
		if err := checkSQLite(ctx, db, minSQLite); err != nil {
			return nil, err
		}
	}
	ddl := "CREATE TABLE IF NOT EXISTS " + q + ` (
	resource  TEXT   NOT NULL,
	lock_name TEXT   NOT NULL,
	slot      TEXT   NOT NULL,
	mark      BIGINT NOT NULL,
	PRIMARY KEY (resource, lock_name, slot))`
	if _, err := db.ExecContext(ctx, ddl); err != nil {
		return nil, fmt.Errorf("sqlfence: creating table %s: %w", table, err)
	}
	p := d.param
	f := &Fence{db: db, d: d, table: table, quoted: q}
	f.upsert = f.upsertFrom(1)
	f.getMark = fmt.Sprintf(`SELECT mark FROM %s WHERE resource = %s AND lock_name = %s AND slot = %s`, q, p(1), p(2), p(3))
	return f, nil
}

// upsertFrom is the upsert of the mark with its parameters numbered from
// i: resource, lock, slot, token.
func (f *Fence) upsertFrom(i int) string {
	p := f.d.param
	return fmt.Sprintf(`INSERT INTO %[1]s AS m (resource, lock_name, slot, mark) VALUES (%[2]s, %[3]s, %[4]s, %[5]s)
ON CONFLICT (resource, lock_name, slot) DO UPDATE SET mark = excluded.mark
WHERE m.mark <= excluded.mark
RETURNING mark AS kahuna_mark`, f.quoted, p(i), p(i+1), p(i+2), p(i+3))
}

func checkSQLite(ctx context.Context, db *sql.DB, min string) error {
	var v string
	if err := db.QueryRowContext(ctx, "SELECT sqlite_version()").Scan(&v); err != nil {
		return fmt.Errorf("sqlfence: SQLite dialect: reading sqlite_version(): %w", err)
	}
	if versionLess(v, min) {
		return fmt.Errorf("sqlfence: SQLite %s has no upsert with RETURNING; %s or later is needed", v, min)
	}
	return nil
}

// versionLess compares dotted decimal versions.
func versionLess(a, b string) bool {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(as) || i < len(bs); i++ {
		var x, y int
		if i < len(as) {
			fmt.Sscan(as[i], &x)
		}
		if i < len(bs) {
			fmt.Sscan(bs[i], &y)
		}
		if x != y {
			return x < y
		}
	}
	return false
}

// Do runs write in a transaction that first raises the mark of (resource,
// tok.Lock, tok.Slot) to tok.Value, and commits both only if write returns
// nil. A stale tok rolls back and returns a *fence.StaleError with the mark,
// write not run. A failure of the database or of write rolls everything
// back (the mark too) and is returned wrapped; it is never a
// *fence.StaleError. write must do its statements on tx.
func (f *Fence) Do(ctx context.Context, resource string, tok fence.Token, write func(ctx context.Context, tx *sql.Tx) error) error {
	if err := tok.Validate(); err != nil {
		return err
	}
	tx, err := f.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlfence: resource %q: begin: %w", resource, err)
	}
	committed := false
	defer func() {
		if !committed {
			tx.Rollback() // its error adds nothing: the transaction is gone either way
		}
	}()
	var mark int64
	err = tx.QueryRowContext(ctx, f.upsert, resource, tok.Lock, tok.Slot, int64(tok.Value)).Scan(&mark)
	if errors.Is(err, sql.ErrNoRows) {
		// Stale. The upsert locked the row, so this reads the mark that won.
		if err := tx.QueryRowContext(ctx, f.getMark, resource, tok.Lock, tok.Slot).Scan(&mark); err != nil {
			return fmt.Errorf("sqlfence: resource %q: reading the mark above %s: %w", resource, tok, err)
		}
		return &fence.StaleError{Resource: resource, Token: tok, Current: uint64(mark)}
	}
	if err != nil {
		return fmt.Errorf("sqlfence: resource %q: raising the mark in %s to %s: %w", resource, f.table, tok, err)
	}
	if err := write(ctx, tx); err != nil {
		return fmt.Errorf("sqlfence: resource %q: fenced write with %s: %w", resource, tok, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlfence: resource %q: commit with %s: %w", resource, tok, err)
	}
	committed = true
	return nil
}

// Exec runs one statement under the fence (Do with a write that runs
// query with args on the transaction) and returns its result.
func (f *Fence) Exec(ctx context.Context, resource string, tok fence.Token, query string, args ...any) (sql.Result, error) {
	var res sql.Result
	err := f.Do(ctx, resource, tok, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		res, err = tx.ExecContext(ctx, query, args...)
		return err
	})
	return res, err
}

type txKey struct{}

// Fence implements fence.Store with Do: write finds the transaction with
// TxFrom(ctx) and must do its statements there for them to be fenced.
func (f *Fence) Fence(ctx context.Context, resource string, tok fence.Token, write func(ctx context.Context) error) error {
	return f.Do(ctx, resource, tok, func(ctx context.Context, tx *sql.Tx) error {
		return write(context.WithValue(ctx, txKey{}, tx))
	})
}

// TxFrom returns the fenced transaction of a write run by Fence.
func TxFrom(ctx context.Context) (*sql.Tx, bool) {
	tx, ok := ctx.Value(txKey{}).(*sql.Tx)
	return tx, ok
}

// Mark reads the mark of (resource, lock, slot); ok is false when no
// fenced write has landed there.
func (f *Fence) Mark(ctx context.Context, resource, lock, slot string) (mark uint64, ok bool, err error) {
	var m int64
	err = f.db.QueryRowContext(ctx, f.getMark, resource, lock, slot).Scan(&m)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("sqlfence: reading the mark of resource %q: %w", resource, err)
	}
	return uint64(m), true, nil
}
