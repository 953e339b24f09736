package api

import "time"

// SandboxStats is the body of GET /v1/sandboxes/{ref}/stats, one line of its follow
// stream, and one entry of GET /v1/stats: a sandbox's resource use as the host kernel
// accounts it, sampled by the node at an interval. A sandbox that is not running
// answers its state with zeros for usage.
type SandboxStats struct {
	ID      string       `json:"id"`
	Name    string       `json:"name"`
	State   string       `json:"state"`
	Time    time.Time    `json:"time"`
	CPU     CPUStats     `json:"cpu"`
	Memory  MemoryStats  `json:"memory"`
	Disk    DiskStats    `json:"disk"`
	PIDs    PIDStats     `json:"pids"`
	Network NetworkStats `json:"network"`
	// History is the sandbox's recent samples, oldest first (with ?history=1 only).
	History []StatsSample `json:"history,omitzero"`
}

// CPUStats: cores in use over the last interval, CPU time used since the sandbox's
// container started, and the limit in cores (0: none).
type CPUStats struct {
	Cores        float64 `json:"cores"`
	UsageSeconds float64 `json:"usage_seconds"`
	LimitCores   float64 `json:"limit_cores"`
}

// MemoryStats: memory in use (less the inactive file cache), the limit, and the most
// the container has used.
type MemoryStats struct {
	UsedBytes  int64 `json:"used_bytes"`
	LimitBytes int64 `json:"limit_bytes"`
	PeakBytes  int64 `json:"peak_bytes"`
}

// DiskStats: bytes used on the sandbox's disk (its writable layer) and its size.
type DiskStats struct {
	UsedBytes  int64 `json:"used_bytes"`
	LimitBytes int64 `json:"limit_bytes"`
}

// PIDStats: processes (and threads) in the sandbox, and the limit.
type PIDStats struct {
	Current int64 `json:"current"`
	Limit   int64 `json:"limit"`
}

// NetworkStats: bytes the sandbox received and sent, counted on the host side of its
// link, and its open TCP connections.
type NetworkStats struct {
	RxBytes     uint64 `json:"rx_bytes"`
	TxBytes     uint64 `json:"tx_bytes"`
	Connections int64  `json:"connections"`
}

// StatsSample is one point of a sandbox's history.
type StatsSample struct {
	Time        time.Time `json:"time"`
	CPUCores    float64   `json:"cpu_cores"`
	MemoryBytes int64     `json:"memory_bytes"`
	DiskBytes   int64     `json:"disk_bytes"`
}

// StatsList is the body of GET /v1/stats.
type StatsList struct {
	Sandboxes []SandboxStats `json:"sandboxes"`
}
