// Package envdpb holds the protocol of the E2B-compatible in-sandbox plane: the .proto
// files and the Go code protoc generates from them (processpb, filesystempb and their
// Connect bindings). Regenerate with `go generate ./internal/e2b/envdpb` (needs protoc,
// protoc-gen-go and protoc-gen-connect-go on PATH); the generated code is committed.
package envdpb

//go:generate protoc -I . -I /usr/include --go_out=. --go_opt=module=github.com/airlockhq/airlock/internal/e2b/envdpb --connect-go_out=. --connect-go_opt=module=github.com/airlockhq/airlock/internal/e2b/envdpb process.proto filesystem.proto
