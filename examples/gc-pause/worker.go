package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/fence"
)

// The parent tells a worker what to do in its environment.
const (
	roleEnv     = "GCPAUSE_ROLE"     // "worker"
	nameEnv     = "GCPAUSE_NAME"     // "C1" reads, pauses and writes value+1; "C2" waits and writes 100
	endpointEnv = "GCPAUSE_ENDPOINT" // the node's URL
	dsnEnv      = "GCPAUSE_DSN"
	fenceEnv    = "GCPAUSE_FENCE" // "1": write through the fence
	idEnv       = "GCPAUSE_ID"    // the value's row
	lockEnv     = "GCPAUSE_LOCK"  // the lock's name, also the fenced resource
	ttlEnv      = "GCPAUSE_TTL"
)

// A worker writes one line per step to stdout: "event <text>" for the
// log, "result <key> <value>" for the parent to check, and "stopping"
// just before it stops itself.

func fenceToken(lock string, token int64) (fence.Token, error) {
	return fence.TokenOf(lock, "", token)
}

func worker() int {
	if err := work(context.Background()); err != nil {
		fmt.Printf("event error: %v\n", err)
		return 1
	}
	return 0
}

func work(ctx context.Context) error {
	name, lockName := os.Getenv(nameEnv), os.Getenv(lockEnv)
	fenced := os.Getenv(fenceEnv) == "1"
	id, err := strconv.Atoi(os.Getenv(idEnv))
	if err != nil {
		return fmt.Errorf("%s: %w", idEnv, err)
	}
	ttl, err := time.ParseDuration(os.Getenv(ttlEnv))
	if err != nil {
		return fmt.Errorf("%s: %w", ttlEnv, err)
	}
	st, err := openStore(ctx, os.Getenv(dsnEnv))
	if err != nil {
		return err
	}
	defer st.close()
	client, err := kahuna.Dial(ctx, []string{os.Getenv(endpointEnv)})
	if err != nil {
		return err
	}
	defer client.Close()

	switch name {
	case "C1":
		lock, err := kahuna.Acquire(ctx, client, lockName, kahuna.WithTTL(ttl))
		if err != nil {
			return err
		}
		fmt.Printf("event acquired lease (%v), token %d\n", ttl, lock.FencingToken())
		v, err := st.read(ctx, id)
		if err != nil {
			return err
		}
		fmt.Printf("event reads value=%d, computes %d+1=%d\n", v, v, v+1)
		fmt.Println("stopping")
		// Stop here as a long GC pause would: the whole process, timers
		// included, until the parent sends SIGCONT. The stop is delivered
		// asynchronously, so go on only once SIGCONT has arrived.
		resumed := make(chan os.Signal, 1)
		signal.Notify(resumed, syscall.SIGCONT)
		if err := syscall.Kill(os.Getpid(), syscall.SIGSTOP); err != nil {
			return err
		}
		<-resumed
		late := time.Since(lock.Expires()).Round(10 * time.Millisecond)
		<-lock.Lost() // the deadline has passed: the handle says so at once
		fmt.Printf("event resumed: its handle says lost (%v), %v past its deadline\n",
			errors.Is(context.Cause(lock.Context()), kahuna.ErrLockLost), late)
		fmt.Println("result lost true")
		err = st.write(ctx, id, v+1, fenced, lockName, lock.FencingToken())
		var stale *fence.StaleError
		switch {
		case errors.As(err, &stale):
			fmt.Printf("event writes %d with token %d -> REJECTED (current token %d)\n", v+1, lock.FencingToken(), stale.Current)
			fmt.Printf("result rejected %d\n", stale.Current)
		case err != nil:
			return err
		default:
			fmt.Printf("event writes %d -> accepted\n", v+1)
		}
	case "C2":
		start := time.Now()
		lock, err := kahuna.Acquire(ctx, client, lockName, kahuna.WithTTL(ttl), kahuna.WithWait(time.Minute))
		if err != nil {
			return err
		}
		fmt.Printf("event acquired lease (%v) after waiting %v for C1's to end, token %d\n",
			ttl, time.Since(start).Round(10*time.Millisecond), lock.FencingToken())
		fmt.Printf("result token %d\n", lock.FencingToken())
		if err := st.write(ctx, id, 100, fenced, lockName, lock.FencingToken()); err != nil {
			return err
		}
		fmt.Println("event writes 100 -> accepted")
		if err := lock.Unlock(ctx); err != nil {
			return err
		}
	default:
		return fmt.Errorf("%s %q: want C1 or C2", nameEnv, name)
	}
	return nil
}
