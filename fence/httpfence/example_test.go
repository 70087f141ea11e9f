package httpfence_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/kahunago/kahuna/fence"
	"github.com/kahunago/kahuna/fence/httpfence"
)

func ExampleHandler() {
	var value string // written only through the fenced handler
	srv := httptest.NewServer(httpfence.Handler(fence.NewMemoryStore(), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		value = string(b)
	})))
	defer srv.Close()

	put := func(tok uint64, v string) {
		t := fence.Token{Lock: "orders/42", Value: tok}
		resp, err := httpfence.WithFence(srv.Client(), t).Post(srv.URL, "text/plain", strings.NewReader(v))
		if err != nil {
			fmt.Println(err)
			return
		}
		defer resp.Body.Close()
		if stale := httpfence.Stale(resp, "orders", t); stale != nil {
			fmt.Printf("token %d: %d, current %d\n", tok, resp.StatusCode, stale.Current)
			return
		}
		fmt.Printf("token %d: %d\n", tok, resp.StatusCode)
	}
	put(2, "from the second holder")
	put(1, "from the first holder, paused")
	fmt.Println("value:", value)
	// Output:
	// token 2: 200
	// token 1: 409, current 2
	// value: from the second holder
}
