// Package cluster holds the tests of several real nodes that form one cluster: each
// node is the built daemon (airlockd serve) with its own configuration, state
// directory, socket and address, in a network namespace of its own (as if on a host of
// its own), and all of them share one PostgreSQL server and one S3 object store that
// the test starts. The harness (Cluster) and the tests are in its test files; it owns
// no production code.
package cluster
