package main

import (
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/kahunago/kahuna"
)

// Both servers answer the lock routes as the node decides: a grant, a
// refusal to another owner, a release, and errors for a bad body or path.
func TestServersAnswerLockCalls(t *testing.T) {
	for _, server := range []string{"nethttp", "fasthttp"} {
		t.Run(server, func(t *testing.T) {
			n, err := kahuna.Open(kahuna.Config{Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close()
			serve, shut, err := newServer(server, n)
			if err != nil {
				t.Fatal(err)
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- serve(ln) }()
			defer func() {
				if err := shut(); err != nil {
					t.Error(err)
				}
				<-done
			}()
			url := "http://" + ln.Addr().String()
			call := func(path, body string) (int, lockReply) {
				t.Helper()
				resp, err := http.Post(url+path, "application/json", strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				var r lockReply
				if b, _ := io.ReadAll(resp.Body); resp.StatusCode == http.StatusOK {
					if err := json.Unmarshal(b, &r); err != nil {
						t.Fatalf("%s: %q: %v", path, b, err)
					}
				}
				return resp.StatusCode, r
			}
			a := `{"resource":"r","owner":"YQ==","expiresMs":60000,"durability":0}`
			b := `{"resource":"r","owner":"Yg==","expiresMs":60000,"durability":0}`
			for _, c := range []struct {
				path, body string
				code       int
				status     kahuna.Status
			}{
				{"/v1/locks/try-lock", a, http.StatusOK, kahuna.Locked},
				{"/v1/locks/try-lock", b, http.StatusOK, kahuna.Busy},
				{"/v1/locks/try-unlock", a, http.StatusOK, kahuna.Unlocked},
				{"/v1/locks/try-lock", b, http.StatusOK, kahuna.Locked},
				{"/v1/locks/try-lock", `{"resource":`, http.StatusBadRequest, 0},
				{"/v1/locks/nope", a, http.StatusNotFound, 0},
			} {
				code, r := call(c.path, c.body)
				if code != c.code || (code == http.StatusOK && kahuna.Status(r.Type) != c.status) {
					t.Fatalf("%s %s: %d %+v, want %d %v", c.path, c.body, code, r, c.code, c.status)
				}
			}
		})
	}
}

func TestNewServerRefusesUnknown(t *testing.T) {
	if _, _, err := newServer("h2o", nil); err == nil {
		t.Fatal("no error for an unknown server")
	}
}
