package closedloop

import (
	"errors"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Samples are kept only inside the window, sorted, and the hooks run at
// its edges, once each, in order.
func TestRunKeepsTheWindowsSamples(t *testing.T) {
	var opened, closed atomic.Int64 // UnixNano
	w := Window{
		Warmup: 30 * time.Millisecond, Duration: 60 * time.Millisecond,
		Opened: func() error { opened.Store(time.Now().UnixNano()); return nil },
		Closed: func() error { closed.Store(time.Now().UnixNano()); return nil },
	}
	var steps atomic.Int64
	samples, err := Run(4, w, func(c *Caller) bool {
		steps.Add(1)
		time.Sleep(time.Millisecond)
		// The sample is when it was taken, so the test can place it: taken
		// once the window is seen open, after Opened has run. (Taken
		// before, it could be recorded as the window opens, before Opened
		// stored its time.) Record drops those taken as the window closes.
		if c.Measuring() {
			c.Record(time.Duration(time.Now().UnixNano()))
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(samples) == 0 || int64(len(samples)) >= steps.Load() {
		t.Fatalf("%d samples of %d steps: want some, not the warm-up's", len(samples), steps.Load())
	}
	if !slices.IsSorted(samples) {
		t.Fatal("samples not sorted")
	}
	if first, last := int64(samples[0]), int64(samples[len(samples)-1]); first < opened.Load() || last > closed.Load() {
		t.Fatalf("samples from %d to %d outside the window %d..%d", first, last, opened.Load(), closed.Load())
	}
}

func TestRunEndsOnAFailure(t *testing.T) {
	broken := NewBreakage()
	boom := errors.New("connection broke")
	broken.Fail(boom)
	broken.Fail(errors.New("a later failure"))
	_, err := Run(2, Window{Warmup: time.Hour, Duration: time.Hour, Broken: broken}, func(*Caller) bool {
		time.Sleep(time.Millisecond)
		return true
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Run returned %v, want %v", err, boom)
	}
}

// A caller whose step returns false stops; the others go on.
func TestRunStopsACallerWhoseStepFails(t *testing.T) {
	var zeroSteps atomic.Int64
	samples, err := Run(2, Window{Duration: 20 * time.Millisecond}, func(c *Caller) bool {
		if c.ID == 0 {
			zeroSteps.Add(1)
			return false
		}
		time.Sleep(time.Millisecond)
		c.Record(time.Millisecond)
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if zeroSteps.Load() != 1 || len(samples) == 0 {
		t.Fatalf("caller 0 stepped %d times, %d samples from caller 1", zeroSteps.Load(), len(samples))
	}
}

func TestQuantile(t *testing.T) {
	s := []time.Duration{1 * time.Microsecond, 2 * time.Microsecond, 3 * time.Microsecond, 4 * time.Microsecond, 5 * time.Microsecond}
	if q := Quantile(s, 0.5); q != 3*time.Microsecond {
		t.Fatalf("p50 %v", q)
	}
	if q := Quantile(s, 1); q != 5*time.Microsecond {
		t.Fatalf("p100 %v", q)
	}
	if q := Quantile(nil, 0.5); q != 0 {
		t.Fatalf("p50 of nothing %v", q)
	}
}

// Each whole message reaches deliver in order; the reader ends on the
// first refusal, which is the run's failure, or on the end of the stream.
func TestReadAnswersDeliversWholeMessagesUntilARefusal(t *testing.T) {
	var got []string
	broken := NewBreakage()
	refused := errors.New("answer for no caller")
	ReadAnswers(strings.NewReader("aaabbbcccddd"), 3, broken, func(m []byte) error {
		got = append(got, string(m))
		if string(m) == "ccc" {
			return refused
		}
		return nil
	})
	if strings.Join(got, " ") != "aaa bbb ccc" || !errors.Is(broken.failure(), refused) {
		t.Fatalf("delivered %q, failure %v; want aaa bbb ccc, then %v", got, broken.failure(), refused)
	}

	broken = NewBreakage()
	got = nil
	ReadAnswers(strings.NewReader("aaabb"), 3, broken, func(m []byte) error { got = append(got, string(m)); return nil })
	if strings.Join(got, " ") != "aaa" || !errors.Is(broken.failure(), io.ErrUnexpectedEOF) {
		t.Fatalf("delivered %q, failure %v; want aaa, then a torn message", got, broken.failure())
	}
}

func TestAwaitGivesUpWhenTheRunBreaks(t *testing.T) {
	broken := NewBreakage()
	answer := make(chan byte, 1)
	answer <- 7
	if v, ok := Await(answer, broken); !ok || v != 7 {
		t.Fatalf("Await = %v, %v; want 7, true", v, ok)
	}
	broken.Fail(errors.New("connection broke"))
	if _, ok := Await(answer, broken); ok {
		t.Fatal("Await answered after the run broke with no answer")
	}
}
