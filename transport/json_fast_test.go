package transport

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/kahunago/kahuna/lease"
)

// FuzzFastJSON holds json_fast.go to encoding/json: what the fast readers
// take, json.Unmarshal takes too and reads to the same values; what the
// fast writers write is json.Marshal's bytes.
func FuzzFastJSON(f *testing.F) {
	f.Add([]byte(`{"resource":"r","owner":"b3duZXI=","expiresMs":30000,"durability":1}`), "r", "owner", int64(5), false)
	f.Add([]byte(` { "resource" : "a/b" , "durability" : -0 } `), "<&>", "", int64(-1), true)
	f.Add([]byte(`{"servedFrom":"http://n2:2070","type":101,"fencingToken":9007199254740993,"reason":"x"}`), "é\u2028\x01", "\"\\", int64(1)<<40, false)
	f.Add([]byte(`{"resource":"r","resource":"s"}`), "", "", int64(0), false)
	f.Add([]byte(`{"owner":"","expiresMs":2147483648}`), "\xff", "", int64(0), false)
	f.Add([]byte(`{}`), "", "", int64(0), false)
	f.Add([]byte(`{"resource":"a\nb"}`), "", "", int64(0), false)
	f.Add([]byte(`{"servedFrom":"\u0041"}`), "", "", int64(0), false)
	f.Add([]byte(`{"Resource":"r","TYPE":1}`), "", "", int64(0), false)
	f.Fuzz(func(t *testing.T, b []byte, s1, s2 string, n int64, nilOwner bool) {
		if lb, ok := decodeLockBody(b); ok {
			var want lockBody
			if err := json.Unmarshal(b, &want); err != nil || decodeBody(b, &lockBody{}) != "" || !reflect.DeepEqual(lb, want) {
				t.Fatalf("%q: fast %+v, encoding/json %+v (%v)", b, lb, want, err)
			}
		}
		if gb, ok := decodeGetBody(b); ok {
			var want getBody
			if err := json.Unmarshal(b, &want); err != nil || decodeBody(b, &getBody{}) != "" || !reflect.DeepEqual(gb, want) {
				t.Fatalf("%q: fast %+v, encoding/json %+v (%v)", b, gb, want, err)
			}
		}
		if a, ok := decodeLockAnswer(b); ok {
			var want restLockAnswer
			if err := json.Unmarshal(b, &want); err != nil || !reflect.DeepEqual(a, want) {
				t.Fatalf("%q: fast %+v, encoding/json %+v (%v)", b, a, want, err)
			}
		}
		r := lockReply{ServedFrom: s1, Type: lease.Status(n % 300), FencingToken: n, Reason: s2}
		for i := range n % 3 {
			r.Grants = append(r.Grants, grantReply{Slot: int(i), FencingToken: n - i})
		}
		if free := int(n % 5); len(r.Grants) > 0 {
			r.PermitsFree = &free
		}
		if got, want := appendLockReply(nil, r), mustMarshal(r); !bytes.Equal(got, want) {
			t.Fatalf("lock reply %+v: fast %s, encoding/json %s", r, got, want)
		}
		l := restLock{Resource: s1, Owner: []byte(s2), ExpiresMs: n, Durability: int32(n)}
		if nilOwner {
			l.Owner = nil
		}
		if got, want := appendRestLock(nil, l), mustMarshal(l); !bytes.Equal(got, want) {
			t.Fatalf("request %+v: fast %s, encoding/json %s", l, got, want)
		}
	})
}
