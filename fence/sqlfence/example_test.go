package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/kahunago/kahuna/fence"
	"github.com/kahunago/kahuna/fence/sqlfence"
)

// A holder paused past its lease writes with its old token after the next
// holder has written: the transaction rolls back and says who won.
func ExampleFence_Do() {
	dir, _ := os.MkdirTemp("", "sqlfence-example-")
	defer os.RemoveAll(dir)
	db, _ := sql.Open("sqlite", "file:"+filepath.Join(dir, "x.db")+"?_pragma=busy_timeout(10000)&_txlock=immediate")
	defer db.Close()
	ctx := context.Background()
	db.Exec("CREATE TABLE counter (id INTEGER PRIMARY KEY, v INTEGER); INSERT INTO counter VALUES (1, 0)")
	f, err := sqlfence.New(ctx, db, sqlfence.SQLite, "fence_marks")
	if err != nil {
		fmt.Println(err)
		return
	}
	set := func(tok uint64, v int) error {
		return f.Do(ctx, "counter", fence.Token{Lock: "counter", Value: tok}, func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "UPDATE counter SET v = ? WHERE id = 1", v)
			return err
		})
	}
	fmt.Println("second holder (token 2) writes 100:", set(2, 100))
	err = set(1, 1)
	var stale *fence.StaleError
	fmt.Println("first holder (token 1) writes 1, stale:", errors.As(err, &stale), "winning token:", stale.Current)
	var v int
	db.QueryRow("SELECT v FROM counter WHERE id = 1").Scan(&v)
	fmt.Println("value:", v)
	// Output:
	// second holder (token 2) writes 100: <nil>
	// first holder (token 1) writes 1, stale: true winning token: 2
	// value: 100
}
