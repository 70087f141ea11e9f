// Package codecs measures libraries beside the codecs the core module
// writes by hand (transport/wire.go for the batch streams' protobuf,
// transport/json_fast.go for the REST lock calls' JSON), on the same
// messages. The hand-written side is measured in the core module
// (go test -run '^$' -bench 'Wire|JSON' -benchmem ./transport); each side
// also measures the common reference (protobuf-go, encoding/json), so
// figures from the two binaries compare as ratios to it.
// conformance_test.go records where vtprotobuf's decoding differs from
// protobuf-go's, which the hand decoders follow. See
// docs/benchmarks-log.md, "The hand-written codecs beside libraries".
package codecs
