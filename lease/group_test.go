package lease

import (
	"strings"
	"testing"
	"time"
)

func TestBusyNameRoundTrip(t *testing.T) {
	for _, place := range []int{1, 7, MaxGroupNames} {
		if got := BusyNameOf(BusyName(place)); got != place {
			t.Errorf("BusyNameOf(BusyName(%d)) = %d", place, got)
		}
	}
	for _, reason := range []string{"", "name x is held by another owner", "name 0 is held by another owner", "name 3 is busy", "partition key"} {
		if got := BusyNameOf(reason); got != 0 {
			t.Errorf("BusyNameOf(%q) = %d, want 0", reason, got)
		}
	}
}

// A lock of several names is checked whole: each name as a lock's
// resource, then the group's own rules; every reason names the place of
// the name at fault, never the name.
func TestCheckGroup(t *testing.T) {
	ok := Request{Op: TryLock, Resource: "acct/1", Also: []string{"acct/2", "acct/3"}, Owner: []byte("o"), TTL: time.Minute, Durability: Persistent}
	if _, why := ok.Check(); why != "" {
		t.Fatalf("a good group refused: %s", why)
	}
	many := make([]string, MaxGroupNames)
	for i := range many {
		many[i] = "acct/" + strings.Repeat("x", i+1)
	}
	for _, c := range []struct {
		name string
		mod  func(r *Request)
		want string
	}{
		{"get", func(r *Request) { r.Op, r.Owner, r.TTL = Get, nil, 0 }, "several names are for a lock, an extend or an unlock, not Get"},
		{"empty also", func(r *Request) { r.Also = []string{} }, "also is empty"},
		{"too many", func(r *Request) { r.Also = many }, "65 names, over the limit of 64"},
		{"ephemeral", func(r *Request) { r.Durability = Ephemeral }, "is persistent"},
		{"wait", func(r *Request) { r.Wait = time.Second }, "does not wait on the server"},
		{"shared", func(r *Request) { r.Shared = true }, "shared is for read/write locks"},
		{"empty name", func(r *Request) { r.Also = []string{"acct/2", ""} }, "name 3: resource is empty"},
		{"twice", func(r *Request) { r.Also = []string{"acct/2", "acct/1"} }, "name 3 is name 1 again"},
		{"another key", func(r *Request) { r.Also = []string{"acct/2", "users/1"} }, "name 3 has another partition key"},
		{"no key", func(r *Request) { r.Resource, r.Also = "a", []string{"b"} }, "name 2 has another partition key"},
		{"semaphore", func(r *Request) { r.Also = []string{SemaphorePrefix + "x"} }, "takes plain locks"},
		{"too many bytes", func(r *Request) {
			r.Also = []string{"acct/" + strings.Repeat("y", 1000)}
			for i := range 16 {
				r.Also = append(r.Also, "acct/"+strings.Repeat("z", 1000)+string(rune('a'+i)))
			}
		}, "over the limit of 16384"},
	} {
		r := ok
		r.Also = append([]string(nil), ok.Also...)
		c.mod(&r)
		if _, why := r.Check(); !strings.Contains(why, c.want) {
			t.Errorf("%s: reason %q, want %q", c.name, why, c.want)
		}
	}
}
