package kahuna_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
)

// Callers that take overlapping sets in opposite orders, each waiting
// for every name, all finish: the names are taken in one order whatever
// the order given, so nobody waits in a cycle.
func TestAcquireAllOppositeOrdersDoNotDeadlock(t *testing.T) {
	n := openNode(t, kahuna.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a deadline for a deadlock, not a wait
	defer cancel()
	sets := [][]string{{"acct/1", "acct/2"}, {"acct/2", "acct/1"}, {"acct/2", "acct/3", "acct/1"}, {"acct/3", "acct/1"}}
	var wg sync.WaitGroup
	errs := make(chan error, 4*len(sets))
	for round := range 4 {
		for _, set := range sets {
			wg.Add(1)
			go func() {
				defer wg.Done()
				locks, err := kahuna.AcquireAll(ctx, n, set, kahuna.WithWaitForever(), kahuna.WithTTL(10*time.Second))
				if err != nil {
					errs <- err
					return
				}
				for i, lk := range locks {
					if lk.Resource() != set[i] {
						errs <- errors.New("locks out of the order of the names: " + lk.Resource() + " for " + set[i])
					}
				}
				time.Sleep(time.Duration(round) * time.Millisecond) // holds them a moment
				for _, lk := range locks {
					if err := lk.Unlock(context.Background()); err != nil {
						errs <- err
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// A name that cannot be taken makes AcquireAll give back what it took.
func TestAcquireAllReleasesWhatItTookWhenANameIsBusy(t *testing.T) {
	ctx := context.Background()
	n := openNode(t, kahuna.Config{})
	other, err := kahuna.Acquire(ctx, n, "acct/9")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Unlock(ctx)
	_, err = kahuna.AcquireAll(ctx, n, []string{"acct/9", "acct/1", "acct/5"}, kahuna.WithWait(50*time.Millisecond))
	if !errors.Is(err, kahuna.ErrBusy) || !strings.Contains(err.Error(), "acct/9") {
		t.Fatalf("AcquireAll with acct/9 held: %v, want busy naming acct/9", err)
	}
	for _, name := range []string{"acct/1", "acct/5"} {
		if r, err := n.TryLock(ctx, name, []byte("someone"), time.Second, kahuna.Persistent); err != nil || r.Status != kahuna.Locked {
			t.Fatalf("%s after AcquireAll gave up: %+v %v, want it free", name, r, err)
		}
	}
}

func TestAcquireAllInOneSession(t *testing.T) {
	ctx := context.Background()
	n := openNode(t, kahuna.Config{})
	s, err := kahuna.NewSession(ctx, n, kahuna.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	locks, err := kahuna.AcquireAll(ctx, n, []string{"b", "a"}, kahuna.WithSession(s))
	if err != nil {
		t.Fatal(err)
	}
	if string(locks[0].Owner()) != s.ID() || string(locks[1].Owner()) != s.ID() {
		t.Fatalf("owners %q %q, want the session's %q", locks[0].Owner(), locks[1].Owner(), s.ID())
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for _, lk := range locks {
		if lk.Context().Err() == nil {
			t.Fatalf("%s live after its session closed", lk.Resource())
		}
	}
}

func TestAcquireAllRefusesBadInput(t *testing.T) {
	n := openNode(t, kahuna.Config{})
	for _, names := range [][]string{nil, {"a", "b", "a"}} {
		_, err := kahuna.AcquireAll(context.Background(), n, names)
		var se *kahuna.StatusError
		if !errors.As(err, &se) || se.Status != kahuna.InvalidInput {
			t.Errorf("AcquireAll(%q): %v, want InvalidInput", names, err)
		}
	}
	if r, _ := n.TryLock(context.Background(), "a", []byte("x"), time.Second, kahuna.Persistent); r.Status != kahuna.Locked {
		t.Fatalf("a refused AcquireAll left a held: %+v", r)
	}
}
