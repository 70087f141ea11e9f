package lease

import (
	"strings"
	"testing"
	"time"
)

// A batch is checked whole: each name as the call's resource, then the
// batch's own rules; names of any partition keys and either durability
// are fine, and every reason names the place of the name at fault.
func TestCheckBatch(t *testing.T) {
	for _, op := range []Op{Extend, Unlock} {
		ok := Request{Op: op, Resource: "a", Also: []string{"acct/2", "users/3"}, Owner: []byte("o"), Durability: Ephemeral}
		if op == Extend {
			ok.TTL = time.Minute
		}
		c, why := ok.Check()
		if why != "" {
			t.Fatalf("%v: a good batch refused: %s", op, why)
		}
		if r := c.Request(); !r.IsBatch() {
			t.Fatalf("%v: not a batch", op)
		}
		many := make([]string, MaxGroupNames)
		for i := range many {
			many[i] = strings.Repeat("x", i+1)
		}
		for _, c := range []struct {
			name string
			mod  func(r *Request)
			want string
		}{
			{"empty also", func(r *Request) { r.Also = []string{} }, "also is empty"},
			{"too many", func(r *Request) { r.Also = many }, "65 names, over the limit of 64"},
			{"empty name", func(r *Request) { r.Also = []string{"b", ""} }, "name 3: resource is empty"},
			{"twice", func(r *Request) { r.Also = []string{"b", "a"} }, "name 3 is name 1 again"},
			{"twice in also", func(r *Request) { r.Also = []string{"b", "b"} }, "name 3 is name 2 again"},
			{"semaphore", func(r *Request) { r.Also = []string{SemaphorePrefix + "x"} }, "takes plain locks"},
			{"election first", func(r *Request) { r.Resource = ElectionPrefix + "x" }, "name 1 is a semaphore, a read/write lock or an election"},
			{"wait", func(r *Request) { r.Wait = time.Second }, "wait is only for a lock"},
			{"too many bytes", func(r *Request) {
				r.Also = nil
				for i := range 17 {
					r.Also = append(r.Also, strings.Repeat("z", 1000)+string(rune('a'+i)))
				}
			}, "over the limit of 16384"},
		} {
			r := ok
			r.Also = append([]string(nil), ok.Also...)
			c.mod(&r)
			if _, why := r.Check(); !strings.Contains(why, c.want) {
				t.Errorf("%v %s: reason %q, want %q", op, c.name, why, c.want)
			}
		}
	}
	long := Request{Op: Extend, Resource: "a", Also: []string{"b"}, Owner: []byte("o"), TTL: MaxTTL + time.Second}
	if _, why := long.Check(); why == "" {
		t.Fatal("a batch over the TTL limit passed")
	}
}
