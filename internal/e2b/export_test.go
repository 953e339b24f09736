package e2b

// FakeSandbox lets the external tests (node_test.go) give this package's own tests a
// sandbox on a fake node.
var FakeSandbox = &fakeSandbox
