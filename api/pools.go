package api

// PoolRequest is the body of PUT /v1/pools/{name}: the members' image (a name or
// digest already on the node), runtime ("" : the node's default), limits (zero: the
// node's defaults), network mode ("": baseline) and how many to keep ready (0 to 256).
type PoolRequest struct {
	Image   string `json:"image"`
	Runtime string `json:"runtime,omitempty"`
	Limits  Limits `json:"limits"`
	Network string `json:"network,omitempty"`
	Size    int    `json:"size"`
}

// Pool is a warm pool and how it fares since the daemon started: a create with the
// same image, runtime, limits and network mode claims one of its ready members (a hit);
// one that finds none ready is a cold create (a miss).
type Pool struct {
	Name        string `json:"name"`
	Image       string `json:"image"`
	ImageDigest string `json:"image_digest"`
	Runtime     string `json:"runtime"`
	Limits      Limits `json:"limits"`
	Network     string `json:"network"`
	Size        int    `json:"size"`
	Ready       int    `json:"ready"`
	Hits        int64  `json:"hits"`
	Misses      int64  `json:"misses"`
	// RefillLastMS and RefillAvgMS are how long the latest member start took, and the
	// mean, in milliseconds.
	RefillLastMS float64 `json:"refill_last_ms"`
	RefillAvgMS  float64 `json:"refill_avg_ms"`
}

// PoolList is the answer of GET /v1/pools.
type PoolList struct {
	Pools []Pool `json:"pools"`
}
