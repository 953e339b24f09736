// Package egress owns the enforcement of a sandbox's egress policy on the node: the
// policy model and its decisions (policy.go), the protected address ranges and the
// parsing of IP literals in every encoding (classify.go), a dialer that checks every
// resolved address and dials exactly the one it checked (dialer.go), the per-node CA
// that lets the proxy terminate TLS (ca.go), the HTTP(S) forward and transparent proxy
// with its audit records (proxy.go, forward.go, tunnel.go), and the DNS server that only
// answers names a sandbox's policy could reach (dns.go).
//
// It must not touch network namespaces, veth pairs or nftables (internal/sandboxlink owns
// those), must not store anything (audit records and DNS queries leave through
// callbacks), and knows sandboxes only through the SandboxInfo its caller's Lookup
// returns. Apart from the CA files it is given a directory for, it writes nothing.
//
// Hostile surfaces it guards: every byte a sandbox sends (requests, hostnames, IP
// literals in any encoding, TLS ClientHellos, DNS queries) is parsed as an attacker's;
// a decision is taken on the address actually dialled, never on a name the sandbox
// resolved; each sandbox's idle upstream connections are bounded (maxIdleUpstream),
// and audit records leave through callbacks that never block on the sandbox's rate.
package egress
