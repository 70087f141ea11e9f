package lease

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// TestCheck: each invalid request has its own reason, naming the field
// and the limit; a valid one has none; Valid agrees with Check.
func TestCheck(t *testing.T) {
	ok := []byte("o")
	big := strings.Repeat("x", 2000)
	cases := []struct {
		name string
		op   Op
		res  string
		own  []byte
		ttl  time.Duration
		d    Durability
		want string
	}{
		{"valid trylock", TryLock, "r", ok, time.Second, Persistent, ""},
		{"valid extend at max ttl", Extend, "r", ok, MaxTTL, Ephemeral, ""},
		{"valid unlock ignores ttl", Unlock, "r", ok, 0, Persistent, ""},
		{"valid get ignores owner and ttl", Get, "r", nil, -time.Hour, Persistent, ""},
		{"valid at the size limits", TryLock, big[:MaxResourceBytes], []byte(big[:MaxOwnerBytes]), time.Second, Ephemeral, ""},
		{"empty resource", TryLock, "", ok, time.Second, Ephemeral, "resource is empty"},
		{"empty resource on get", Get, "", nil, 0, Ephemeral, "resource is empty"},
		{"long resource", Get, big, nil, 0, Persistent, "resource is 2000 bytes, over the limit of 1024"},
		{"resource one over", TryLock, big[:MaxResourceBytes+1], ok, time.Second, Persistent, "resource is 1025 bytes, over the limit of 1024"},
		{"unknown durability", TryLock, "r", ok, time.Second, Durability(2), "durability 2 is unknown (0 ephemeral, 1 persistent)"},
		{"negative durability", Get, "r", nil, 0, Durability(-1), "durability -1 is unknown (0 ephemeral, 1 persistent)"},
		{"nil owner", TryLock, "r", nil, time.Second, Persistent, "owner is empty"},
		{"empty owner on unlock", Unlock, "r", []byte{}, 0, Persistent, "owner is empty"},
		{"long owner", Extend, "r", []byte(big), time.Second, Persistent, "owner is 2000 bytes, over the limit of 1024"},
		{"zero ttl", TryLock, "r", ok, 0, Persistent, "ttl 0s is not positive"},
		{"negative ttl", Extend, "r", ok, -5 * time.Millisecond, Persistent, "ttl -5ms is not positive"},
		{"ttl 1000h", TryLock, "r", ok, 1000 * time.Hour, Persistent, "ttl 1000h0m0s is over the limit of 596h31m23.647s"},
		{"ttl just over", Extend, "r", ok, MaxTTL + time.Millisecond, Persistent, "ttl 596h31m23.648s is over the limit of 596h31m23.647s"},
		{"unknown op", Op(9), "r", ok, time.Second, Persistent, "op Op(9) is unknown"},
		// The first problem is reported, resource before owner before ttl.
		{"all wrong", TryLock, "", nil, 0, Persistent, "resource is empty"},
	}
	for _, c := range cases {
		got := Check(c.op, c.res, c.own, c.ttl, c.d)
		if got != c.want {
			t.Errorf("%s: Check = %q, want %q", c.name, got, c.want)
		}
		if v := Valid(c.op, c.res, c.own, c.ttl, c.d); v != (got == "") {
			t.Errorf("%s: Valid = %v with reason %q", c.name, v, got)
		}
		if got != "" && (got != strings.ToLower(got[:1])+got[1:] || strings.Contains(got, "xxxx")) {
			t.Errorf("%s: reason %q is not lower-case or quotes the input", c.name, got)
		}
	}
}

func TestCheckWait(t *testing.T) {
	for _, c := range []struct {
		wait time.Duration
		want string
	}{
		{0, ""},
		{time.Second, ""},
		{MaxWait, ""},
		{WaitForever, ""},
		{-time.Second, "wait -1s is negative (only WaitForever, -1ns, waits without a limit)"},
		{-2, "wait -2ns is negative (only WaitForever, -1ns, waits without a limit)"},
		{MaxWait + time.Millisecond, "wait 596h31m23.648s is over the limit of 596h31m23.647s"},
	} {
		if got := CheckWait(c.wait); got != c.want {
			t.Errorf("CheckWait(%v) = %q, want %q", c.wait, got, c.want)
		}
		if ValidWait(c.wait) != (c.want == "") {
			t.Errorf("ValidWait(%v) = %v, reason %q", c.wait, ValidWait(c.wait), c.want)
		}
	}
}

// TestCheckAllocates: the valid path, on every request, allocates nothing.
func TestCheckAllocates(t *testing.T) {
	owner := []byte("o")
	if n := testing.AllocsPerRun(100, func() {
		_ = Check(TryLock, "r", owner, time.Second, Persistent)
	}); n != 0 {
		t.Fatalf("Check of a valid request allocates %v times", n)
	}
}

func TestExcerpt(t *testing.T) {
	short := strings.Repeat("a", MaxExcerptBytes)
	if got := Excerpt(short); got != short {
		t.Errorf("Excerpt of %d bytes = %q, want it unchanged", len(short), got)
	}
	if got := Excerpt(""); got != "" {
		t.Errorf("Excerpt(\"\") = %q", got)
	}
	long := strings.Repeat("x", 2000)
	want := strings.Repeat("x", MaxExcerptBytes) + "…(2000 bytes)"
	if got := Excerpt(long); got != want {
		t.Errorf("Excerpt of 2000 bytes = %q, want %q", got, want)
	}
	// A multi-byte character across the cut is dropped whole.
	s := strings.Repeat("a", MaxExcerptBytes-1) + "é" + strings.Repeat("b", 100)
	got := Excerpt(s)
	if !utf8.ValidString(got) || !strings.HasPrefix(got, strings.Repeat("a", MaxExcerptBytes-1)+"…(") {
		t.Errorf("Excerpt across a character = %q", got)
	}
	if got := Excerpt("r\xff"); got != "r\uFFFD" {
		t.Errorf("Excerpt of bytes that are not UTF-8 = %q", got)
	}
	for _, s := range []string{long, s, strings.Repeat("日本", 100), strings.Repeat("\xff", 100)} {
		if got := Excerpt(s); len(got) > MaxExcerptBytes+len("…(99999 bytes)") || !utf8.ValidString(got) {
			t.Errorf("Excerpt(%d bytes) = %q: too long or not UTF-8", len(s), got)
		}
	}
}

func TestDescribe(t *testing.T) {
	for s, want := range map[Status]string{
		Busy:             "busy (held by another owner)",
		InvalidOwner:     "held by another owner",
		LockDoesNotExist: "no such lock (never locked, released or expired)",
		InvalidInput:     "invalid input",
		Status(77):       "Status(77)",
	} {
		if got := s.Describe(); got != want {
			t.Errorf("%v.Describe() = %q, want %q", s, got, want)
		}
	}
	for _, s := range []Status{Errored, WaitingForReplication, Aborted} {
		if !strings.HasPrefix(s.Describe(), "outcome unknown") {
			t.Errorf("%v.Describe() = %q, want an unknown outcome", s, s.Describe())
		}
	}
	if !strings.Contains(MustRetry.Describe(), "nothing was applied") {
		t.Errorf("MustRetry.Describe() = %q", MustRetry.Describe())
	}
}
