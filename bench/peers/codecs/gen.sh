#!/usr/bin/env bash
# Generates lockspbvt from the core module's transport/proto/locks.proto
# with protoc-gen-go and planetscale/vtprotobuf, for the codec benchmarks
# only (the core module does not use it). Needs protoc (Debian:
# `apt-get install -y protobuf-compiler`). The plugins are installed at
# pinned versions into a throwaway directory.
set -euo pipefail

PROTOC_GEN_GO_VERSION=v1.36.12
VTPROTO_VERSION=v0.6.0

here="$(cd "$(dirname "$0")" && pwd)"
proto="$here/../../../transport/proto"
pkg=github.com/kahunago/kahuna/bench/peers/codecs/lockspbvt

bin="$(mktemp -d)"
trap 'rm -rf "$bin"' EXIT
GOFLAGS= GOBIN="$bin" go install "google.golang.org/protobuf/cmd/protoc-gen-go@${PROTOC_GEN_GO_VERSION}"
GOFLAGS= GOBIN="$bin" go install "github.com/planetscale/vtprotobuf/cmd/protoc-gen-go-vtproto@${VTPROTO_VERSION}"

# The proto path is the proto's own directory, so the file registers as
# "locks.proto", apart from the core module's "transport/proto/locks.proto".
protoc \
	--proto_path="$proto" \
	--plugin=protoc-gen-go="$bin/protoc-gen-go" \
	--plugin=protoc-gen-go-vtproto="$bin/protoc-gen-go-vtproto" \
	--go_out="$here/lockspbvt" --go_opt=paths=source_relative --go_opt=Mlocks.proto=$pkg \
	--go-vtproto_out="$here/lockspbvt" --go-vtproto_opt=paths=source_relative --go-vtproto_opt=Mlocks.proto=$pkg \
	--go-vtproto_opt=features=marshal+unmarshal+size \
	locks.proto
echo "gen.sh: generated lockspbvt with $(protoc --version), protoc-gen-go ${PROTOC_GEN_GO_VERSION}, protoc-gen-go-vtproto ${VTPROTO_VERSION}"
