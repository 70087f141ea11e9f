package transport

import (
	"encoding/json"
	"testing"
)

// The REST lock call's JSON, read and written without reflection
// (json_fast.go) and by encoding/json, side by side: the hand-written
// codec stays only while it wins measurably.
//
//	go test -run '^$' -bench 'JSON' -benchmem ./transport

var benchLockBody = []byte(`{"resource":"jobs/export","owner":"b3duZXItMQ==","expiresMs":30000,"durability":1}`)

func BenchmarkJSONDecodeLockBodyFast(b *testing.B) {
	for b.Loop() {
		if _, ok := decodeLockBody(benchLockBody); !ok {
			b.Fatal("not decoded")
		}
	}
}

func BenchmarkJSONDecodeLockBodyStd(b *testing.B) {
	for b.Loop() {
		var lb lockBody
		if err := json.Unmarshal(benchLockBody, &lb); err != nil {
			b.Fatal(err)
		}
	}
}

var benchLockReply = lockReply{ServedFrom: "http://127.0.0.1:2070", Type: 0, FencingToken: 41}

func BenchmarkJSONEncodeLockReplyFast(b *testing.B) {
	buf := make([]byte, 0, 128)
	for b.Loop() {
		buf = appendLockReply(buf[:0], benchLockReply)
	}
	if want, _ := json.Marshal(benchLockReply); string(buf) != string(want) {
		b.Fatalf("encoded %s, encoding/json %s", buf, want)
	}
}

func BenchmarkJSONEncodeLockReplyStd(b *testing.B) {
	for b.Loop() {
		if _, err := json.Marshal(benchLockReply); err != nil {
			b.Fatal(err)
		}
	}
}
