#!/usr/bin/env bash
# Regenerates transport/lockspb from locks.proto. Run through
# `go generate ./transport` from the module root (or directly).
#
# Needs protoc (3.21 is what the checked-in code was made with; on Debian:
# `apt-get install -y protobuf-compiler`) and Go. The two protoc plugins are
# installed at pinned versions into a throwaway directory, so whatever is on
# PATH cannot change the output. Keep PROTOC_GEN_GO_VERSION equal to the
# google.golang.org/protobuf version in go.mod.
set -euo pipefail

PROTOC_GEN_GO_VERSION=v1.36.12
PROTOC_GEN_GO_GRPC_VERSION=v1.6.2

root="$(cd "$(dirname "$0")/../.." && pwd)"
module="$(cd "$root" && go list -m)"

command -v protoc >/dev/null || {
	echo "gen.sh: protoc not found (apt-get install -y protobuf-compiler)" >&2
	exit 1
}

bin="$(mktemp -d)"
trap 'rm -rf "$bin"' EXIT
# `go install pkg@version` builds outside this module, so flags meant for
# the module (GOFLAGS) are left out.
GOFLAGS= GOBIN="$bin" go install "google.golang.org/protobuf/cmd/protoc-gen-go@${PROTOC_GEN_GO_VERSION}"
GOFLAGS= GOBIN="$bin" go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@${PROTOC_GEN_GO_GRPC_VERSION}"

# The proto path is the module root, so the file registers as
# "transport/proto/locks.proto" and cannot collide with another locks.proto
# in the same binary.
cd "$root"
protoc \
	--proto_path=. \
	--plugin=protoc-gen-go="$bin/protoc-gen-go" \
	--plugin=protoc-gen-go-grpc="$bin/protoc-gen-go-grpc" \
	--go_out=. --go_opt=module="$module" \
	--go-grpc_out=. --go-grpc_opt=module="$module" \
	transport/proto/locks.proto transport/proto/kahuna_v1.proto
echo "gen.sh: regenerated transport/lockspb and transport/kahunav1pb with $(protoc --version), protoc-gen-go ${PROTOC_GEN_GO_VERSION}, protoc-gen-go-grpc ${PROTOC_GEN_GO_GRPC_VERSION}"
