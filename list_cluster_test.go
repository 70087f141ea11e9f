package kahuna_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/internal/testcluster"
)

// listAll lists prefix from l until its last page, pages of limit,
// retrying a MustRetry (a partition between leaders) like a client.
func listAll(t *testing.T, list func(ctx context.Context, prefix string, opts ...kahuna.ListOption) (kahuna.LockPage, error), prefix string, limit int) []kahuna.ListedLock {
	t.Helper()
	ctx := context.Background()
	var all []kahuna.ListedLock
	for after := ""; ; {
		var page kahuna.LockPage
		var err error
		testcluster.Eventually(t, "a list page", func() bool {
			page, err = list(ctx, prefix, kahuna.WithLimit(limit), kahuna.WithAfter(after))
			var se *kahuna.StatusError
			return !errors.As(err, &se) || se.Status != kahuna.MustRetry
		})
		if err != nil {
			t.Fatalf("list %q after %q: %v", prefix, after, err)
		}
		if len(page.Locks) > limit {
			t.Fatalf("page of %d locks, limit %d", len(page.Locks), limit)
		}
		all = append(all, page.Locks...)
		if page.Next == "" {
			return all
		}
		if page.Next != page.Locks[len(page.Locks)-1].Resource {
			t.Fatalf("next %q is not the page's last name", page.Next)
		}
		after = page.Next
	}
}

// One list, asked of any member or through a Client, returns the live
// locks of every partition, whichever member leads it: the ephemeral ones
// live only in their leader's memory, so the list must gather them from
// each leader. Released locks and names outside the prefix are not in
// it; pages of any size give the same locks, once each, in name order.
func TestClusterListAcrossLeaders(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 6, steadyLeaders) // its ephemeral locks must outlive the test: no unplanned election
	ctx := context.Background()
	n1 := c.Node(1)
	type want struct {
		token int64
		d     kahuna.Durability
	}
	wanted := map[string]want{}
	leaders := map[uint64]map[kahuna.Durability]bool{}
	for i := 0; len(wanted) < 24; i++ {
		res := fmt.Sprintf("list/k%d/x", i)
		d := []kahuna.Durability{kahuna.Ephemeral, kahuna.Persistent}[i%2]
		r := testcluster.Settled(t, func() (kahuna.Result, error) { return n1.TryLock(ctx, res, []byte("o-"+res), time.Hour, d) })
		if r.Status != kahuna.Locked {
			t.Fatalf("lock %s: %+v", res, r)
		}
		wanted[res] = want{r.FencingToken, d}
		leader := c.Leader(n1.Partition(res))
		if leaders[leader] == nil {
			leaders[leader] = map[kahuna.Durability]bool{}
		}
		leaders[leader][d] = true
	}
	for id := range uint64(3) {
		if !leaders[id+1][kahuna.Ephemeral] || !leaders[id+1][kahuna.Persistent] {
			t.Fatalf("node %d leads no partition of an ephemeral and a persistent lock (%v): the test proves nothing", id+1, leaders)
		}
	}
	// Not listed: a released lock of each durability, a name outside the prefix.
	for _, d := range []kahuna.Durability{kahuna.Ephemeral, kahuna.Persistent} {
		res := "list/released/" + d.String()
		testcluster.Settled(t, func() (kahuna.Result, error) { return n1.TryLock(ctx, res, []byte("o"), time.Hour, d) })
		if r := testcluster.Settled(t, func() (kahuna.Result, error) { return n1.Unlock(ctx, res, []byte("o"), d) }); r.Status != kahuna.Unlocked {
			t.Fatalf("unlock %s: %+v", res, r)
		}
	}
	testcluster.Settled(t, func() (kahuna.Result, error) {
		return n1.TryLock(ctx, "listx/y", []byte("o"), time.Hour, kahuna.Ephemeral)
	})

	names := slices.Sorted(func(yield func(string) bool) {
		for n := range wanted {
			if !yield(n) {
				return
			}
		}
	})
	check := func(who string, got []kahuna.ListedLock) {
		t.Helper()
		var gotNames []string
		for _, l := range got {
			gotNames = append(gotNames, l.Resource)
			w := wanted[l.Resource]
			if string(l.Owner) != "o-"+l.Resource || l.FencingToken != w.token || l.Durability != w.d || time.Until(l.Expires) < 50*time.Minute {
				t.Errorf("%s: %+v, want token %d, %v, expiring in an hour", who, l, w.token, w.d)
			}
		}
		if !slices.Equal(gotNames, names) {
			t.Fatalf("%s: listed %v, want %v", who, gotNames, names)
		}
	}
	for _, id := range c.IDs() {
		for _, limit := range []int{1000, 5} {
			check(fmt.Sprintf("node %d, pages of %d", id, limit), listAll(t, c.Node(id).List, "list/", limit))
		}
	}

	ep := c.Member(2).Endpoint
	for _, opts := range [][]kahuna.ClientOption{nil, {kahuna.WithREST()}} {
		cl, err := kahuna.Dial(ctx, []string{ep}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("client %v", opts != nil), listAll(t, cl.List, "list/", 7))
		// Bad input is refused before it is sent, with the reason.
		var se *kahuna.StatusError
		if _, err := cl.List(ctx, "list/", kahuna.WithLimit(kahuna.MaxListLimit+1)); !errors.As(err, &se) || se.Status != kahuna.InvalidInput || !strings.Contains(se.Reason, "limit") {
			t.Errorf("client, limit over the maximum: %v", err)
		}
		cl.Close()
	}
	if _, err := n1.List(ctx, strings.Repeat("p", kahuna.MaxResourceBytes+1)); !isInvalid(err, "prefix") {
		t.Errorf("node, prefix too long: %v", err)
	}
	if _, err := n1.List(ctx, "", kahuna.WithLimit(-1)); !isInvalid(err, "negative") {
		t.Errorf("node, negative limit: %v", err)
	}
	// The node refuses bad input the client would not send: 400, InvalidInput.
	for _, q := range []string{"limit=1001", "limit=x", "prefix=" + strings.Repeat("p", kahuna.MaxResourceBytes+1), "limit=1&limit=2", "bogus=1"} {
		resp, err := http.Get(ep + "/v1/locks?" + q)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), `"type":100`) {
			t.Errorf("GET /v1/locks?%.40s: %s %s", q, resp.Status, body)
		}
	}
	// Nothing changed: every lock is still listed.
	check("after the refusals", listAll(t, n1.List, "list/", 1000))

	// A semaphore led by another member: its holders come through that
	// member's share of the listing.
	var name string
	for i := 0; name == ""; i++ {
		if n := fmt.Sprintf("listsem%d/pool", i); c.Leader(n1.Partition(kahuna.SemaphorePrefix+n)) != 1 {
			name = n
		}
	}
	testcluster.Settled(t, func() (kahuna.Result, error) {
		p, err := kahuna.NewSemaphore(n1, name, 2).TryAcquire(ctx, 1, kahuna.WithOwner([]byte("holder")), kahuna.WithTTL(time.Hour))
		if err != nil {
			return kahuna.Result{}, err
		}
		return kahuna.Result{Status: kahuna.Locked, FencingToken: p.FencingToken()}, nil
	})
	got := listAll(t, n1.List, kahuna.SemaphorePrefix+name, 10)
	if len(got) != 1 || len(got[0].Holders) != 1 || string(got[0].Holders[0].Owner) != "holder" || time.Until(got[0].Holders[0].Expires) < 50*time.Minute {
		t.Fatalf("a semaphore led by another member: %+v", got)
	}
}

func isInvalid(err error, why string) bool {
	var se *kahuna.StatusError
	return errors.As(err, &se) && se.Status == kahuna.InvalidInput && strings.Contains(se.Reason, why)
}
