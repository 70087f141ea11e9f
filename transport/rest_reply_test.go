package transport

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/kahunago/kahuna/lease"
)

// The hand-encoded lock reply is byte for byte what encoding/json writes.
func TestLockReplyEncoding(t *testing.T) {
	for _, v := range []lockReply{
		{},
		{ServedFrom: "", Type: lease.Locked, FencingToken: 0},
		{ServedFrom: "http://10.0.0.2:2070", Type: lease.Busy, FencingToken: 1 << 62},
		{Type: lease.InvalidInput, FencingToken: -1, Reason: `resource: over 1024 bytes ("x…")`},
		{Type: lease.MustRetry, Reason: "no space: /var/lib/kahuna has 1.0 MiB free, below the reserve of 256.0 MiB (--disk-reserve 256MiB)"},
		{ServedFrom: "a<b>&c", Type: lease.Status(-7), Reason: "tab\there\nnewline \x00 \u2028 é 漢 \xff"},
	} {
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		writeLockReply(rec, v)
		if got := rec.Body.String(); got != string(want) {
			t.Errorf("%+v:\n got %s\nwant %s", v, got, want)
		}
		if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json; charset=utf-8" {
			t.Errorf("status %d, Content-Type %q", rec.Code, rec.Header().Get("Content-Type"))
		}
	}
}

func TestIsJSONMediaType(t *testing.T) {
	for ct, want := range map[string]bool{
		"application/json": true, "application/json; charset=utf-8": true, "Application/JSON": true,
		"text/plain": false, "": false, "application/json-patch+json": false,
	} {
		if got := isJSONMediaType(ct); got != want {
			t.Errorf("%q: %v, want %v", ct, got, want)
		}
	}
}
