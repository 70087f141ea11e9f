package httpfence_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/kahunago/kahuna/fence"
	"github.com/kahunago/kahuna/fence/httpfence"
)

func TestHeaderRoundTrip(t *testing.T) {
	for _, tok := range []fence.Token{
		{Lock: "orders/42", Value: 17},
		{Lock: "reports nightly", Slot: "read", Value: 0},
		{Lock: "a;b=c%d, e\"f", Slot: "slot 3; x=y", Value: fence.MaxValue},
		{Lock: "ünïcode\x00\xff", Value: 1},
		{Lock: strings.Repeat(";", fence.MaxNameLen), Slot: strings.Repeat("%", fence.MaxNameLen), Value: 2},
	} {
		v := httpfence.FormatHeader(tok)
		got, err := httpfence.ParseHeader(v)
		if err != nil || got != tok {
			t.Errorf("%q: %v %v, want %v", v, got, err, tok)
		}
	}
	if v := httpfence.FormatHeader(fence.Token{Lock: "orders/42", Value: 17}); v != "lock=orders/42; token=17" {
		t.Errorf("FormatHeader = %q", v)
	}
	// Order and spacing are free.
	got, err := httpfence.ParseHeader("  slot=read ;token=3;lock=reports%20nightly ")
	if want := (fence.Token{Lock: "reports nightly", Slot: "read", Value: 3}); err != nil || got != want {
		t.Errorf("reordered: %v %v", got, err)
	}
}

func TestParseHeaderErrors(t *testing.T) {
	long := strings.Repeat("x", fence.MaxNameLen+1)
	for _, tc := range []struct{ v, reason string }{
		{"", `field "" is not name=value`},
		{"lock=a", "no token field"},
		{"token=1", "no lock field"},
		{"lock=a; token=x", `token "x" is not a decimal number`},
		{"lock=a; token=", `token "" is not a decimal number`},
		{"lock=a; token=+1", `token "+1" is not a decimal number`},
		{"lock=a; token=1.5", `token "1.5" is not a decimal number`},
		{"lock=a; token=-1", `token "-1" is negative`},
		{"lock=a; token=99999999999999999999", "is over the limit"},
		{"lock=a; token=9223372036854775808", "token 9223372036854775808 is over the limit of 9223372036854775807"},
		{"lock=; token=1", "lock name is empty"},
		{"lock=" + long + "; token=1", "lock name is 1025 bytes, over the limit of 1024"},
		{"lock=a; slot=" + long + "; token=1", "slot is 1025 bytes, over the limit of 1024"},
		{"lock=a; token=1; lock=b", `field "lock" given twice`},
		{"lock=a; token=1; owner=me", `unknown field "owner"`},
		{"lock=a b; token=1", `byte ' ' at 1 must be %XX-encoded`},
		{"lock=a%2; token=1", "ends inside a %XX escape"},
		{"lock=a%zz; token=1", "bad %XX escape"},
		{"lock=a; token=1;", `field "" is not name=value`},
		{strings.Repeat("x", 7000), "over the limit"},
	} {
		_, err := httpfence.ParseHeader(tc.v)
		if !errors.Is(err, httpfence.ErrBadHeader) || !strings.Contains(err.Error(), tc.reason) {
			t.Errorf("%.40q: %v, want ErrBadHeader with %q", tc.v, err, tc.reason)
		}
	}
}

// FuzzParseHeader: whatever parses is a valid token that FormatHeader
// writes back to a header parsing to the same token.
func FuzzParseHeader(f *testing.F) {
	for _, s := range []string{"lock=orders/42; token=17", "lock=a%20b; token=0; slot=read", "lock=a; token=-1", "token=1;lock=%FF"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		tok, err := httpfence.ParseHeader(v)
		if err != nil {
			if !errors.Is(err, httpfence.ErrBadHeader) {
				t.Fatalf("%q: %v does not match ErrBadHeader", v, err)
			}
			return
		}
		if err := tok.Validate(); err != nil {
			t.Fatalf("%q parsed to an invalid token: %v", v, err)
		}
		again, err := httpfence.ParseHeader(httpfence.FormatHeader(tok))
		if err != nil || again != tok {
			t.Fatalf("%q: %v, formatted and parsed again: %v %v", v, tok, again, err)
		}
	})
}
