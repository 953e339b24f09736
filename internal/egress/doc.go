// Package egress owns the enforcement of a sandbox's egress policy on the node: the
// policy model and its decisions (policy.go), the protected address ranges and the
// parsing of IP literals in every encoding (classify.go), a dialer that checks every
// resolved address and dials exactly the one it checked (dialer.go), the per-node CA
// that lets the proxy terminate TLS (ca.go), the HTTP(S) forward and transparent proxy
// with its audit records (proxy.go, forward.go, tunnel.go), and the DNS server that only
// answers names a sandbox's policy could reach (dns.go).
//
// The proxy also brokers what a sandbox must not hold. Secrets (substitute.go): the
// sandbox holds a placeholder, and the proxy puts the real value in its place only in
// requests to the secret's own hosts (the headers its binding names, Authorization and
// its Basic credentials by default, and the query string if the secret allows it),
// opening the value per request so a revocation applies at once; a placeholder anywhere
// else refuses the request, and the value appears in no record, log or answer of the
// proxy's own. What those hosts answer is redacted (redact.go) before the sandbox reads
// it. The Airlock API (api.go): requests to
// APIHost, in every mode but none, are served in-process by the caller's handler, with
// the sandbox's session placeholder swapped for a short-lived token, and never
// dialled. SandboxInfo.Decide opens both (a secret's hosts on ports 80 and 443 only),
// and the DNS server answers their names.
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
