package testrun

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestCallers(t *testing.T) {
	if err := Callers(4, time.Minute, func(int) error { return nil }); err != nil {
		t.Fatalf("all return nil: %v", err)
	}
	bad := errors.New("caller 2 failed")
	if err := Callers(4, time.Minute, func(i int) error {
		if i == 2 {
			return bad
		}
		return nil
	}); !errors.Is(err, bad) {
		t.Fatalf("one fails: %v, want its error", err)
	}
	block := make(chan struct{})
	defer close(block)
	err := Callers(3, 50*time.Millisecond, func(i int) error {
		if i == 1 {
			<-block
		}
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "1 of 3 callers still running") {
		t.Fatalf("one hangs: %v, want the hang reported", err)
	}
}
