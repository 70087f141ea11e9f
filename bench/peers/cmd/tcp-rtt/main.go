// Command tcp-rtt measures the round trip of a small message between two
// processes over loopback TCP: the floor under any lock hand-off between
// processes on the machine, to quote beside hot-wait figures taken in the
// same sitting.
//
//	go run ./cmd/tcp-rtt                 # 20,000 round trips of 32 bytes
//	go run ./cmd/tcp-rtt --n 100000
//
// It re-runs itself as the echoing process, so both ends are separate
// processes scheduled as a client and a node are.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/kahunago/kahuna/bench/peers/internal/twoproc"
)

const echoEnv = "TCP_RTT_ECHO"

func main() {
	if os.Getenv(echoEnv) != "" {
		if err := echo(); err != nil {
			fmt.Fprintln(os.Stderr, "tcp-rtt echo:", err)
			os.Exit(1)
		}
		return
	}
	n := flag.Int("n", 20000, "round trips")
	size := flag.Int("size", 32, "message bytes")
	flag.Parse()
	if err := run(*n, *size); err != nil {
		fmt.Fprintln(os.Stderr, "tcp-rtt:", err)
		os.Exit(1)
	}
}

func run(n, size int) error {
	if n < 1 || size < 1 {
		return fmt.Errorf("--n and --size must be at least 1")
	}
	srv, err := twoproc.Start(echoEnv)
	if err != nil {
		return err
	}
	defer srv.Stop()
	conn, err := srv.Dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	buf := make([]byte, size)
	rtts := make([]time.Duration, 0, n)
	for i := range n + n/10 { // the first tenth warms up
		t := time.Now()
		if _, err := conn.Write(buf); err != nil {
			return err
		}
		if _, err := io.ReadFull(conn, buf); err != nil {
			return err
		}
		if i >= n/10 {
			rtts = append(rtts, time.Since(t))
		}
	}
	slices.Sort(rtts)
	q := func(p float64) time.Duration { return rtts[int(p*float64(len(rtts)-1))] }
	fmt.Printf("loopback TCP round trip, %d bytes, %d round trips between two processes: p50 %v  p90 %v  p99 %v\n",
		size, n, q(0.50).Round(100*time.Nanosecond), q(0.90).Round(100*time.Nanosecond), q(0.99).Round(100*time.Nanosecond))
	return nil
}

func echo() error {
	lis, err := twoproc.Listen()
	if err != nil {
		return err
	}
	conn, err := lis.Accept()
	if err != nil {
		return err
	}
	_, err = io.Copy(conn, conn)
	return err
}
