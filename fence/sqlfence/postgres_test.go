package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/kahunago/kahuna/fence"
	"github.com/kahunago/kahuna/fence/sqlfence"
)

// TestPostgresWaitsForTheMarkRow shows what makes the fence atomic under
// READ COMMITTED: a fenced transaction's upsert waits on the row lock of a
// transaction that holds the same key, and is then decided against what
// that transaction committed, or against the old mark if it rolled back.
func TestPostgresWaitsForTheMarkRow(t *testing.T) {
	b := backend{"PostgreSQL", openPostgres(t), sqlfence.PostgreSQL}
	var level string
	if err := b.db.QueryRow("SHOW default_transaction_isolation").Scan(&level); err != nil || level != "read committed" {
		t.Fatalf("default isolation %q (%v), want read committed", level, err)
	}
	f, val := setup(t, b)
	set := "UPDATE " + val + " SET v = $1 WHERE id = 1"
	boom := errors.New("first writer failed")
	for _, tc := range []struct {
		name    string
		aErr    error  // what the first writer's write returns
		bTok    uint64 // the second writer's token
		current uint64 // the mark the second writer is told, 0 if it lands
		value   string
	}{
		{"stale after a commit", nil, 4, 5, "A"},
		{"current after a commit", nil, 6, 0, "B"},
		{"same token after a commit", nil, 5, 0, "B"},
		{"lower token after a rollback", boom, 4, 0, "B"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res := tc.name
			if _, err := f.Exec(ctx, res, tok(3), set, "before"); err != nil {
				t.Fatal(err)
			}
			inside, release := make(chan struct{}), make(chan struct{})
			aDone := make(chan error, 1)
			go func() {
				aDone <- f.Do(ctx, res, tok(5), func(ctx context.Context, tx *sql.Tx) error {
					if _, err := tx.ExecContext(ctx, set, "A"); err != nil {
						return err
					}
					close(inside)
					<-release
					return tc.aErr
				})
			}()
			<-inside
			bDone := make(chan error, 1)
			go func() {
				_, err := f.Exec(ctx, res, tok(tc.bTok), set, "B")
				bDone <- err
			}()
			waitForLockWait(ctx, t, b.db)
			select {
			case err := <-bDone:
				t.Fatalf("second writer returned while the first held the key: %v", err)
			default:
			}
			close(release)
			if err := <-aDone; !errors.Is(err, tc.aErr) {
				t.Fatalf("first writer: %v, want %v", err, tc.aErr)
			}
			err := <-bDone
			if tc.current == 0 && err != nil {
				t.Fatalf("second writer (token %d): %v", tc.bTok, err)
			}
			var stale *fence.StaleError
			if tc.current != 0 && (!errors.As(err, &stale) || stale.Current != tc.current) {
				t.Fatalf("second writer (token %d): %v, want stale with current %d", tc.bTok, err, tc.current)
			}
			if v := b.value(t, val); v != tc.value {
				t.Fatalf("value %q, want %q", v, tc.value)
			}
		})
	}
}

// waitForLockWait returns once a backend of the database waits on a lock.
func waitForLockWait(ctx context.Context, t *testing.T, db *sql.DB) {
	t.Helper()
	for {
		var n int
		err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n)
		if err != nil {
			t.Fatalf("waiting for the second writer to wait on the lock: %v", err)
		}
		if n > 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("the second writer never waited on the first one's lock")
		case <-time.After(time.Millisecond): // poll pace; the condition is the lock wait above
		}
	}
}

// TestPostgresStaleUpsertLocksTheRow: the upsert whose WHERE fails (a stale
// token) still locks the mark's row, so the winning mark Do reads next in
// the same transaction is the one that refused it.
func TestPostgresStaleUpsertLocksTheRow(t *testing.T) {
	b := backend{"PostgreSQL", openPostgres(t), sqlfence.PostgreSQL}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f, marks, _ := setupNamed(t, b)
	if _, err := f.Exec(ctx, "r", tok(5), "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, `INSERT INTO `+marks+` AS m (resource, lock_name, slot, mark) VALUES ('r', 'orders/42', '', 3)
		ON CONFLICT (resource, lock_name, slot) DO UPDATE SET mark = excluded.mark WHERE m.mark <= excluded.mark RETURNING mark`)
	if err != nil {
		t.Fatal(err)
	}
	if rows.Next() {
		t.Fatal("the stale upsert returned a row")
	}
	rows.Close()
	done := make(chan error, 1)
	go func() {
		_, err := f.Exec(ctx, "r", tok(6), "SELECT 1")
		done <- err
	}()
	waitForLockWait(ctx, t, b.db)
	select {
	case err := <-done:
		t.Fatalf("a fenced write got past the stale upsert's transaction: %v", err)
	default:
	}
	tx.Rollback()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
