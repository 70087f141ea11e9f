package httpfence

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/kahunago/kahuna/fence"
)

// Header carries the token of a fenced request:
//
//	Kahuna-Fence: lock=<name>; token=<decimal>[; slot=<slot>]
//
// Fields are separated by ";" (spaces around them ignored), in any order,
// each once; lock and token are required, slot is for a semaphore slot or a
// read/write mode. Names are percent-encoded: bytes other than ASCII
// letters, digits and "-._~/:@" are written %XX, so a name may hold any
// bytes, ";" and "=" included. The token is a decimal of at most
// fence.MaxValue, without sign; a name is at most fence.MaxNameLen bytes
// decoded. For example:
//
//	Kahuna-Fence: lock=orders/42; token=17
//	Kahuna-Fence: lock=reports%20nightly; token=3; slot=read
const Header = "Kahuna-Fence"

// CurrentHeader, on a 409 answer, holds the current mark: the token that
// beat the request's.
const CurrentHeader = "Kahuna-Fence-Current"

// LapsedHeader, set to "true" on a 409 answer, says the request's token
// was refused because its lease ended (a fence.Checked store), with no
// later token to name.
const LapsedHeader = "Kahuna-Fence-Lapsed"

// ErrBadHeader is matched (errors.Is) by every error of ParseHeader.
var ErrBadHeader = errors.New("httpfence: bad " + Header + " header")

// maxHeaderLen bounds what ParseHeader reads: two names of MaxNameLen bytes,
// each byte possibly written %XX, and a token.
const maxHeaderLen = 2*3*fence.MaxNameLen + 64

// FormatHeader returns the Header value for tok.
func FormatHeader(tok fence.Token) string {
	v := "lock=" + escape(tok.Lock) + "; token=" + strconv.FormatUint(tok.Value, 10)
	if tok.Slot != "" {
		v += "; slot=" + escape(tok.Slot)
	}
	return v
}

// ParseHeader parses a Header value and validates the token; every error
// matches ErrBadHeader and says what is wrong.
func ParseHeader(v string) (fence.Token, error) {
	bad := func(format string, args ...any) (fence.Token, error) {
		return fence.Token{}, fmt.Errorf("%w: "+format, append([]any{ErrBadHeader}, args...)...)
	}
	if len(v) > maxHeaderLen {
		return bad("%d bytes, over the limit of %d", len(v), maxHeaderLen)
	}
	var tok fence.Token
	seen := map[string]bool{}
	for field := range strings.SplitSeq(v, ";") {
		field = strings.TrimSpace(field)
		key, val, ok := strings.Cut(field, "=")
		if !ok {
			return bad("field %q is not name=value", truncate(field))
		}
		if seen[key] {
			return bad("field %q given twice", truncate(key))
		}
		seen[key] = true
		switch key {
		case "lock", "slot":
			s, err := unescape(val)
			if err != nil {
				return bad("%s: %v", key, err)
			}
			if key == "lock" {
				tok.Lock = s
			} else {
				tok.Slot = s
			}
		case "token":
			if strings.HasPrefix(val, "-") {
				return bad("token %q is negative", truncate(val))
			}
			if val == "" || strings.Trim(val, "0123456789") != "" {
				return bad("token %q is not a decimal number", truncate(val))
			}
			n, err := strconv.ParseUint(val, 10, 64)
			if err != nil {
				return bad("token %q is over the limit of %d", truncate(val), uint64(fence.MaxValue))
			}
			tok.Value = n
		default:
			return bad("unknown field %q", truncate(key))
		}
	}
	if !seen["lock"] {
		return bad("no lock field")
	}
	if !seen["token"] {
		return bad("no token field")
	}
	if err := tok.Validate(); err != nil {
		return bad("%s", strings.TrimPrefix(err.Error(), fence.ErrInvalid.Error()+": "))
	}
	return tok, nil
}

func truncate(s string) string {
	if len(s) > 32 {
		return s[:32] + "…"
	}
	return s
}

func plain(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~/:@", c) >= 0
}

func escape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if c := s[i]; plain(c) {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// unescape decodes what escape writes, and nothing else: a byte that
// should have been %XX-encoded is an error.
func unescape(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case plain(c):
			b.WriteByte(c)
		case c == '%':
			if i+2 >= len(s) {
				return "", fmt.Errorf("%q ends inside a %%XX escape", truncate(s))
			}
			n, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
			if err != nil {
				return "", fmt.Errorf("%q has a bad %%XX escape at byte %d", truncate(s), i)
			}
			b.WriteByte(byte(n))
			i += 2
		default:
			return "", fmt.Errorf("byte %q at %d must be %%XX-encoded", c, i)
		}
	}
	return b.String(), nil
}
