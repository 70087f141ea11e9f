package transport

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kahunago/kahuna/lease"
)

type restClient struct {
	t    *testing.T
	base string
	hc   *http.Client
}

func newREST(t *testing.T, addr string) *restClient {
	return &restClient{t: t, base: "http://" + addr, hc: &http.Client{Timeout: 10 * time.Second}}
}

func (c *restClient) do(method, path, contentType, body string) (int, map[string]any) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		c.t.Fatalf("%s %s: %d reply is not a JSON object: %q", method, path, resp.StatusCode, raw)
	}
	return resp.StatusCode, m
}

func (c *restClient) post(path, body string) map[string]any {
	c.t.Helper()
	code, m := c.do(http.MethodPost, path, "application/json; charset=utf-8", body)
	if code != http.StatusOK {
		c.t.Fatalf("POST %s %s: %d %v", path, body, code, m)
	}
	return m
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func keys(m map[string]any) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// num reads a JSON number field as an int64.
func num(t *testing.T, m map[string]any, k string) int64 {
	t.Helper()
	v, ok := m[k].(float64)
	if !ok {
		t.Fatalf("field %q = %#v, want a number (in %v)", k, m[k], m)
	}
	return int64(v)
}

func TestRESTEndpoints(t *testing.T) {
	f := newFake()
	srv := startServer(t, forwardedTo{f, "http://n1:2070"}, ServerOptions{NodeName: "n1"})
	c := newREST(t, srv.mixed)
	lockKeys := []string{"fencingToken", "servedFrom", "type"}

	body := `{"resource":"rest/a","owner":"` + b64("owner-A") + `","expiresMs":10000,"durability":1}`
	m := c.post("/v1/locks/try-lock", body)
	if !slices.Equal(keys(m), lockKeys) || m["servedFrom"] != "http://n1:2070" || num(t, m, "type") != 0 || num(t, m, "fencingToken") != 0 {
		t.Fatalf("try-lock = %v", m)
	}
	m = c.post("/v1/locks/try-lock", `{"resource":"rest/a","owner":"`+b64("owner-B")+`","expiresMs":10000,"durability":1}`)
	if num(t, m, "type") != int64(lease.Busy) {
		t.Fatalf("try-lock by B = %v", m)
	}
	m = c.post("/v1/locks/try-extend", `{"resource":"rest/a","owner":"`+b64("owner-A")+`","expiresMs":20000,"durability":1}`)
	if !slices.Equal(keys(m), lockKeys) || num(t, m, "type") != int64(lease.Extended) || num(t, m, "fencingToken") != 0 {
		t.Fatalf("try-extend = %v", m)
	}

	m = c.post("/v1/locks/get-info", `{"resource":"rest/a","durability":1}`)
	if got := keys(m); !slices.Equal(got, []string{"expires", "fencingToken", "owner", "servedFrom", "type"}) {
		t.Fatalf("get-info names = %v", got)
	}
	if num(t, m, "type") != int64(lease.Got) || m["owner"] != b64("owner-A") || m["servedFrom"] != "http://n1:2070" || num(t, m, "fencingToken") != 0 {
		t.Fatalf("get-info = %v", m)
	}
	exp, ok := m["expires"].(map[string]any)
	if !ok || !slices.Equal(keys(exp), []string{"c", "l", "n"}) {
		t.Fatalf("expires = %#v, want {n,l,c}", m["expires"])
	}
	if l := num(t, exp, "l"); l != f.clock().Add(20*time.Second).UnixMilli() || num(t, exp, "n") != 0 || num(t, exp, "c") != 0 {
		t.Fatalf("expires = %v, want l = now+20s in unix ms", exp)
	}
	// Another durability is another namespace. Not Got: the type, as
	// Kahuna answers, and the node the call was forwarded to.
	notGot := []string{"servedFrom", "type"}
	if m := c.post("/v1/locks/get-info", `{"resource":"rest/a","durability":0}`); !slices.Equal(keys(m), notGot) || num(t, m, "type") != int64(lease.LockDoesNotExist) || m["servedFrom"] != "http://n1:2070" {
		t.Fatalf("get-info ephemeral = %v, want type 102 served from http://n1:2070", m)
	}

	m = c.post("/v1/locks/try-unlock", `{"resource":"rest/a","owner":"`+b64("owner-A")+`","durability":1}`)
	if !slices.Equal(keys(m), lockKeys) || num(t, m, "type") != int64(lease.Unlocked) {
		t.Fatalf("try-unlock = %v", m)
	}
	if m := c.post("/v1/locks/get-info", `{"resource":"rest/a","durability":1}`); !slices.Equal(keys(m), notGot) || num(t, m, "type") != int64(lease.LockDoesNotExist) {
		t.Fatalf("get-info after unlock = %v", m)
	}
	m = c.post("/v1/locks/try-lock", `{"resource":"rest/a","owner":"`+b64("owner-B")+`","expiresMs":1000,"durability":1,"somethingNew":[1,2]}`)
	if num(t, m, "type") != 0 || num(t, m, "fencingToken") != 1 {
		t.Fatalf("try-lock after unlock (with an unknown field) = %v, want Locked token 1", m)
	}
	// Kahuna's docs example shape, bare content type.
	code, m := c.do(http.MethodPost, "/v1/locks/try-lock", "application/json",
		`{"resource":"locks/tasks/123","owner":"e594","expiresMs":10000,"durability":0}`)
	if code != 200 || num(t, m, "type") != 0 {
		t.Fatalf("docs example = %d %v", code, m)
	}
}

// TestRESTBadRequests: every malformed request gets a clear error and
// changes nothing.
func TestRESTBadRequests(t *testing.T) {
	f := newFake()
	srv := startServer(t, f, ServerOptions{})
	c := newREST(t, srv.mixed)
	lock := `{"resource":"bad/a","owner":"` + b64("A") + `","expiresMs":60000,"durability":1}`
	c.post("/v1/locks/try-lock", lock)
	before := c.post("/v1/locks/get-info", `{"resource":"bad/a","durability":1}`)
	served := f.served.Load()

	other := `{"resource":"bad/a","owner":"` + b64("B") + `","expiresMs":60000,"durability":1}`
	paths := []string{"/v1/locks/try-lock", "/v1/locks/try-extend", "/v1/locks/try-unlock", "/v1/locks/get-info"}
	for _, p := range paths {
		for _, tc := range []struct {
			name, method, ctype, body string
			code                      int
		}{
			{"GET", http.MethodGet, "application/json", "", http.StatusMethodNotAllowed},
			{"PUT", http.MethodPut, "application/json", other, http.StatusMethodNotAllowed},
			{"text/plain", http.MethodPost, "text/plain", other, http.StatusUnsupportedMediaType},
			{"no content type", http.MethodPost, "", other, http.StatusUnsupportedMediaType},
			{"form", http.MethodPost, "application/x-www-form-urlencoded", "resource=bad/a", http.StatusUnsupportedMediaType},
			{"too large", http.MethodPost, "application/json", `{"resource":"` + strings.Repeat("x", 70<<10) + `"}`, http.StatusRequestEntityTooLarge},
			{"malformed", http.MethodPost, "application/json", `{"resource":"bad/a",`, http.StatusBadRequest},
			{"trailing garbage", http.MethodPost, "application/json", other + ` {}`, http.StatusBadRequest},
			{"trailing junk", http.MethodPost, "application/json", other + `x`, http.StatusBadRequest},
			{"wrong type", http.MethodPost, "application/json", `{"resource":"bad/a","owner":"` + b64("B") + `","expiresMs":"60000","durability":1}`, http.StatusBadRequest},
			{"durability as string", http.MethodPost, "application/json", `{"resource":"bad/a","durability":"Persistent"}`, http.StatusBadRequest},
			{"resource as number", http.MethodPost, "application/json", `{"resource":7}`, http.StatusBadRequest},
			{"expiresMs over int32", http.MethodPost, "application/json", `{"resource":"bad/a","owner":"` + b64("B") + `","expiresMs":4294967296,"durability":1}`, http.StatusBadRequest},
			{"owner not base64", http.MethodPost, "application/json", `{"resource":"bad/a","owner":"!!!","expiresMs":60000,"durability":1}`, http.StatusBadRequest},
			{"null", http.MethodPost, "application/json", `null`, http.StatusBadRequest},
			{"array", http.MethodPost, "application/json", `[1]`, http.StatusBadRequest},
			{"empty", http.MethodPost, "application/json", ``, http.StatusBadRequest},
		} {
			if p == "/v1/locks/get-info" && (tc.name == "owner not base64" || tc.name == "expiresMs over int32" || tc.name == "wrong type") {
				continue // get-info has no such fields: ignored, not an error
			}
			code, m := c.do(tc.method, p, tc.ctype, tc.body)
			if code != tc.code {
				t.Errorf("%s %s: %d %v, want %d", p, tc.name, code, m, tc.code)
				continue
			}
			if msg, _ := m["error"].(string); msg == "" {
				t.Errorf("%s %s: body %v has no error message", p, tc.name, m)
			}
		}
	}

	// Well-formed but invalid: InvalidInput, and the Locker never sees it.
	for _, tc := range []struct {
		body     string
		ttlIssue bool // try-unlock ignores expiresMs
	}{
		{`{"resource":"bad/a","lockId":"` + b64("B") + `","expiresMs":60000,"durability":1}`, false}, // the old field name
		{`{"resource":"bad/a","expiresMs":60000,"durability":1}`, false},
		{`{"resource":"bad/a","owner":null,"expiresMs":60000,"durability":1}`, false},
		{`{"resource":"","owner":"` + b64("B") + `","expiresMs":60000,"durability":1}`, false},
		{`{"resource":"bad/a","owner":"` + b64("B") + `","expiresMs":60000,"durability":2}`, false},
		{`{"resource":"` + strings.Repeat("r", lease.MaxResourceBytes+1) + `","owner":"` + b64("B") + `","expiresMs":60000}`, false},
		{`{"resource":"bad/a","owner":"` + b64("B") + `","expiresMs":0,"durability":1}`, true},
		{`{"resource":"bad/a","owner":"` + b64("B") + `","expiresMs":-5,"durability":1}`, true},
	} {
		for _, p := range paths[:3] {
			if tc.ttlIssue && p == "/v1/locks/try-unlock" {
				continue
			}
			if m := c.post(p, tc.body); num(t, m, "type") != int64(lease.InvalidInput) {
				t.Errorf("%s %s = %v, want type 100", p, tc.body, m)
			}
		}
	}
	if m := c.post("/v1/locks/get-info", `{"durability":1}`); !slices.Equal(keys(m), []string{"reason", "type"}) || num(t, m, "type") != 100 {
		t.Errorf("get-info without resource = %v", m)
	}

	if n := f.served.Load(); n != served {
		t.Fatalf("%d bad requests reached the Locker", n-served)
	}
	after := c.post("/v1/locks/get-info", `{"resource":"bad/a","durability":1}`)
	if !mapsEqualJSON(before, after) {
		t.Fatalf("the lock changed: %v -> %v", before, after)
	}
}

func mapsEqualJSON(a, b map[string]any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

// TestRESTCheckToken: check-token says whether a token is the live
// holder's, with the holder's token and expiry; no lock (released, or its
// lease ended) is -1; a negative token or a body that is not a request
// is 400, and reaches no Locker.
func TestRESTCheckToken(t *testing.T) {
	f := newFake()
	srv := startServer(t, f, ServerOptions{})
	c := newREST(t, srv.mixed)
	check := func(body string) map[string]any {
		t.Helper()
		return c.post("/v1/locks/check-token", body)
	}
	m := check(`{"resource":"ct/a","fencingToken":0,"durability":1}`)
	if m["valid"] != false || num(t, m, "fencingToken") != -1 || num(t, m, "type") != int64(lease.LockDoesNotExist) || m["expires"] != nil {
		t.Fatalf("no lock = %v, want invalid, token -1, type 102, no expiry", m)
	}
	c.post("/v1/locks/try-lock", `{"resource":"ct/a","owner":"`+b64("A")+`","expiresMs":1000,"durability":1}`)
	c.post("/v1/locks/try-unlock", `{"resource":"ct/a","owner":"`+b64("A")+`","durability":1}`)
	c.post("/v1/locks/try-lock", `{"resource":"ct/a","owner":"`+b64("B")+`","expiresMs":20000,"durability":1}`)
	m = check(`{"resource":"ct/a","fencingToken":1,"durability":1}`)
	exp, _ := m["expires"].(map[string]any)
	if m["valid"] != true || num(t, m, "fencingToken") != 1 || num(t, m, "type") != int64(lease.Got) || exp == nil || num(t, exp, "l") != f.clock().Add(20*time.Second).UnixMilli() {
		t.Fatalf("the holder's token = %v, want valid, token 1, its expiry", m)
	}
	m = check(`{"resource":"ct/a","fencingToken":0,"durability":1}`)
	if m["valid"] != false || num(t, m, "fencingToken") != 1 {
		t.Fatalf("a superseded token = %v, want invalid, current token 1", m)
	}
	if m := check(`{"resource":"ct/a","fencingToken":1,"durability":0}`); m["valid"] != false || num(t, m, "fencingToken") != -1 {
		t.Fatalf("the other durability = %v, want no lock", m)
	}
	f.advance(21 * time.Second) // B's lease has ended
	if m := check(`{"resource":"ct/a","fencingToken":1,"durability":1}`); m["valid"] != false || num(t, m, "fencingToken") != -1 {
		t.Fatalf("a lapsed lease's token = %v, want invalid, no lock", m)
	}
	served := f.served.Load()
	for _, body := range []string{`{"resource":"ct/a","fencingToken":-1,"durability":1}`, `{"resource":"ct/a","fencingToken":"x"}`, `[1]`} {
		code, m := c.do(http.MethodPost, "/v1/locks/check-token", "application/json", body)
		if code != http.StatusBadRequest || m["reason"] == nil {
			t.Errorf("%s: %d %v, want 400 with a reason", body, code, m)
		}
	}
	if m := check(`{"fencingToken":1,"durability":1}`); num(t, m, "type") != int64(lease.InvalidInput) || m["valid"] != false {
		t.Errorf("no resource = %v, want InvalidInput", m)
	}
	if n := f.served.Load(); n != served {
		t.Errorf("%d bad check-token requests reached the Locker", n-served)
	}
}
