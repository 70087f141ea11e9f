package lease

import (
	"strings"
	"testing"
)

func page(next string, names ...string) LockPage {
	p := LockPage{Next: next}
	for _, n := range names {
		p.Locks = append(p.Locks, ListedLock{Resource: n, Owner: []byte(next)})
	}
	return p
}

func names(p LockPage) string {
	var s []string
	for _, l := range p.Locks {
		s = append(s, l.Resource)
	}
	return strings.Join(s, ",") + " next=" + p.Next
}

// MergePages keeps name order and the first page's copy of a name, and
// sets Next exactly when a lock may follow the page: more than limit
// locks, or a source page that was cut.
func TestMergePages(t *testing.T) {
	for _, c := range []struct {
		limit int
		pages []LockPage
		want  string
	}{
		{3, []LockPage{page("", "b", "d"), page("", "a", "c")}, "a,b,c next=c"},
		{4, []LockPage{page("", "b", "d"), page("", "a", "c")}, "a,b,c,d next="},
		{5, []LockPage{page("", "b", "d"), page("", "a", "c")}, "a,b,c,d next="},
		{2, []LockPage{page("b", "a", "b"), page("", "z")}, "a,b next=b"},
		{3, []LockPage{page("b", "a", "b"), page("", "z")}, "a,b,z next=z"},
		{2, []LockPage{page("", "a", "b"), page("", "b")}, "a,b next="},
		{2, nil, " next="},
	} {
		if got := names(MergePages(c.limit, c.pages...)); got != c.want {
			t.Errorf("limit %d: %s, want %s", c.limit, got, c.want)
		}
	}
	// A name in two pages is the first page's.
	m := MergePages(5, page("", "x"), LockPage{Locks: []ListedLock{{Resource: "x", Owner: []byte("second")}}})
	if len(m.Locks) != 1 || string(m.Locks[0].Owner) != "" {
		t.Errorf("duplicate: %+v", m.Locks)
	}
}

func TestListRequestCheck(t *testing.T) {
	long := strings.Repeat("x", MaxResourceBytes+1)
	for _, c := range []struct {
		req  ListRequest
		want string
	}{
		{ListRequest{}, ""},
		{ListRequest{Prefix: long[1:], After: long[1:], Limit: MaxListLimit}, ""},
		{ListRequest{Limit: -1}, "limit -1 is negative"},
		{ListRequest{Limit: MaxListLimit + 1}, "over the limit"},
		{ListRequest{Prefix: long}, "prefix is 1025 bytes"},
		{ListRequest{After: long}, "after is 1025 bytes"},
	} {
		got := c.req.Check()
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%d %d %d: %q, want %q", len(c.req.Prefix), len(c.req.After), c.req.Limit, got, c.want)
		}
	}
	if (ListRequest{}).PageSize() != DefaultListLimit || (ListRequest{Limit: 7}).PageSize() != 7 {
		t.Error("PageSize")
	}
}
