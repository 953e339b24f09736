#!/usr/bin/env bash
# Reproduces the "Pulling images" section of bench/RESULTS.md: installs crane (the
# version of go-containerregistry go.mod pins) if it is not on PATH, then runs the pull
# benchmarks, everything on loopback. Needs root and runc. Extra arguments go to
# go test, e.g.
#   bash bench/pull.sh -count 2 -cpuprofile /tmp/pull.prof
set -euo pipefail

cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
export PATH="$PATH:$(go env GOPATH)/bin"

if ! command -v crane >/dev/null; then
	version=$(go list -m -f '{{.Version}}' github.com/google/go-containerregistry)
	echo "bench/pull.sh: installing crane $version" >&2
	GOFLAGS= go install "github.com/google/go-containerregistry/cmd/crane@$version"
fi
go test -run '^$' -bench 'Pull|CreateFromPulledImage' -benchtime 5x -timeout 20m "$@" ./internal/integration/
