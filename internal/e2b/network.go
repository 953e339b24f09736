package e2b

import (
	"net/http"
	"net/netip"
	"slices"

	"github.com/airlockhq/airlock/internal/auth"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/manager"
)

// networkConfig is E2B's network at create and the body of updateNetwork
// (PUT /sandboxes/{id}/network): egress allowed and denied, and the sandbox's
// traffic settings.
type networkConfig struct {
	AllowOut            []string       `json:"allowOut"`
	DenyOut             []string       `json:"denyOut"`
	AllowPublicTraffic  *bool          `json:"allowPublicTraffic"`
	MaskRequestHost     *string        `json:"maskRequestHost"`
	Rules               map[string]any `json:"rules"`
	EgressProxy         map[string]any `json:"egressProxy"`
	HTTPSPorts          []int          `json:"httpsPorts"`
	AllowInternetAccess *bool          `json:"allow_internet_access"` // updateNetwork only
}

// allTraffic is what E2B's denyOut names to deny every destination (ALL_TRAFFIC).
var allTraffic = []string{"0.0.0.0/0", "::/0"}

// egressPolicy maps n onto an Airlock egress policy: Airlock's policy lists what a
// sandbox may reach and denies the rest, so denyOut can only deny all traffic, and
// allowOut's destinations become allowlist rules. denyAll also denies all traffic
// (allow_internet_access false). nil means n asks nothing of egress.
func (n *networkConfig) egressPolicy(denyAll bool) (*manager.NetworkPolicy, error) {
	switch {
	case n.AllowPublicTraffic != nil && *n.AllowPublicTraffic:
		return nil, errdefs.Invalid("allowPublicTraffic true is not supported: Airlock's sandbox ports are never public; every request to one needs the sandbox's traffic access token (E2b-Traffic-Access-Token); leave it out or false")
	case n.MaskRequestHost != nil:
		return nil, errdefs.Invalid("maskRequestHost is not supported: Airlock passes a port's requests on with their own Host header")
	case len(n.Rules) > 0:
		return nil, errdefs.Invalid("network rules (request transforms) are not supported: hand a sandbox credentials with Airlock's secret brokering (airlock secret bind), which substitutes them on egress")
	case n.EgressProxy != nil:
		return nil, errdefs.Invalid("egressProxy is not supported: a sandbox's egress goes through the node's own proxy")
	case len(n.HTTPSPorts) > 0:
		return nil, errdefs.Invalid("httpsPorts is not supported: allowOut destinations are reached on ports 80 and 443, and an address or CIDR range on every port")
	}
	for _, d := range n.DenyOut {
		if !slices.Contains(allTraffic, d) {
			return nil, errdefs.Invalid("denyOut %q is not supported: Airlock's egress policy lists what a sandbox may reach and denies the rest, so denyOut takes only 0.0.0.0/0 (deny everything but allowOut)", d)
		}
		denyAll = true
	}
	if len(n.AllowOut) == 0 {
		if !denyAll {
			return nil, nil
		}
		return &manager.NetworkPolicy{Mode: "deny_all"}, nil
	}
	pol := &manager.NetworkPolicy{Mode: "allowlist"}
	for _, a := range n.AllowOut {
		// E2B allows an address on every port: as a one-address range it is.
		if ip, err := netip.ParseAddr(a); err == nil {
			a = netip.PrefixFrom(ip, ip.BitLen()).String()
		}
		pol.Allow = append(pol.Allow, a)
	}
	return pol, nil
}

// updateNetwork sets a sandbox's egress policy from E2B's network update.
func (c *Control) updateNetwork(w http.ResponseWriter, r *http.Request, p *auth.Principal) error {
	var req networkConfig
	if err := decode(w, r, &req, false); err != nil {
		return err
	}
	denyAll := req.AllowInternetAccess != nil && !*req.AllowInternetAccess
	pol, err := req.egressPolicy(denyAll)
	if err != nil {
		return err
	}
	if pol == nil {
		if req.AllowInternetAccess == nil {
			return errdefs.Invalid("the network update names nothing to change: give allowOut, denyOut or allow_internet_access")
		}
		d := manager.DefaultNetwork // internet access as a sandbox is created with it
		pol = &d
	}
	sb, err := c.resolve(r, p)
	if err != nil {
		return err
	}
	if _, _, err := c.m.SetNetworkPolicy(r.Context(), call(p), sb.ID, *pol); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
