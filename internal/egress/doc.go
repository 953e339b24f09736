// Package egress owns the enforcement of a sandbox's egress policy on the node: the
// policy model and its decisions (policy.go), the protected address ranges and the
// parsing of IP literals in every encoding (classify.go), a dialer that checks every
// resolved address and dials exactly the one it checked (dialer.go), the per-node CA
// that lets the proxy terminate TLS (ca.go), the HTTP(S) forward and transparent proxy
// with its audit records (proxy.go, forward.go, tunnel.go), and the DNS server that only
// answers names a sandbox's policy could reach (dns.go).
//
// It must not touch network namespaces, veth pairs or nftables (internal/netns owns
// those), must not store anything (audit records and DNS queries leave through
// callbacks), and knows sandboxes only through the SandboxInfo its caller's Lookup
// returns. Apart from the CA files it is given a directory for, it writes nothing.
package egress
