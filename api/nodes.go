package api

import "time"

// Resources are amounts of a node's memory (bytes), CPU (cores) and sandboxes: what it
// has, or what its live sandboxes reserve.
type Resources struct {
	Memory    int64   `json:"memory"`
	CPUs      float64 `json:"cpus"`
	Sandboxes int     `json:"sandboxes"`
}

// Node is one node of the cluster, as GET /v1/nodes lists it. State is ready,
// draining (it takes no new sandboxes), lost (its lease lapsed unrenewed) or stopped
// (it shut down cleanly).
type Node struct {
	Name    string `json:"name"`
	State   string `json:"state"`
	Address string `json:"address,omitempty"` // where the other nodes reach it
	// Self is the node that answered.
	Self     bool      `json:"self,omitempty"`
	Capacity Resources `json:"capacity"`
	Reserved Resources `json:"reserved"`
	// Labels are the operators' words on the node (config node.labels), which a
	// create's node_selector matches; Runtimes are the runtimes it runs.
	Labels       map[string]string `json:"labels,omitempty"`
	Runtimes     []string          `json:"runtimes,omitempty"`
	Epoch        int64             `json:"epoch"`
	LeaseExpires time.Time         `json:"lease_expires,omitzero"`
	StartedAt    time.Time         `json:"started_at"`
	RenewedAt    time.Time         `json:"renewed_at"`
}

// NodeList is the body of GET /v1/nodes.
type NodeList struct {
	Nodes []Node `json:"nodes"`
}
