// Package testrun runs tests' concurrent callers.
package testrun

import (
	"fmt"
	"time"
)

// Callers runs caller(0) … caller(n-1) on goroutines of their own and
// returns the first error one returns, or an error when they have not all
// returned within d (a call that hangs). A caller still running then is
// left behind.
func Callers(n int, d time.Duration, caller func(i int) error) error {
	errs := make(chan error, n)
	for i := range n {
		go func() { errs <- caller(i) }()
	}
	deadline := time.After(d)
	for done := 0; done < n; done++ {
		select {
		case err := <-errs:
			if err != nil {
				return err
			}
		case <-deadline:
			return fmt.Errorf("%d of %d callers still running after %v: a call that never returned", n-done, n, d)
		}
	}
	return nil
}
