package config

import (
	"fmt"
	"time"
)

// Metrics configures the node's usage collector (airlock stats, GET /v1/stats) and its
// Prometheus exposition (GET /metrics on the TCP listener).
type Metrics struct {
	// Interval is how often every running sandbox's usage is sampled (default 10s; from
	// 100ms to 1h). Each sample costs the node about 150 µs of CPU per running sandbox.
	Interval string `yaml:"interval"`
	// History is how many samples each sandbox keeps for graphs (default 60, at most
	// 3600); all sandboxes together keep at most 4096 sandboxes' worth.
	History int `yaml:"history"`
	// PerSandbox adds series per sandbox to /metrics (default false), for at most
	// MaxSandboxSeries sandboxes (default 500, at most 10000).
	PerSandbox       bool `yaml:"per_sandbox"`
	MaxSandboxSeries int  `yaml:"max_sandbox_series"`
}

// MetricsSetting is the metrics section in its types.
type MetricsSetting struct {
	Interval         time.Duration
	History          int
	PerSandbox       bool
	MaxSandboxSeries int
}

// metricsSetting checks the metrics section and fills in its defaults.
func (c Config) metricsSetting() (MetricsSetting, []error) {
	m := c.Metrics
	s := MetricsSetting{Interval: 10 * time.Second, History: 60, PerSandbox: m.PerSandbox, MaxSandboxSeries: 500}
	var errs []error
	if m.Interval != "" {
		d, err := time.ParseDuration(m.Interval)
		if err != nil || d < 100*time.Millisecond || d > time.Hour {
			errs = append(errs, fmt.Errorf("metrics.interval %q must be a duration from 100ms to 1h, such as 10s", m.Interval))
		}
		s.Interval = d
	}
	if m.History != 0 {
		if m.History < 1 || m.History > 3600 {
			errs = append(errs, fmt.Errorf("metrics.history %d must be from 1 to 3600 samples (0: 60)", m.History))
		}
		s.History = m.History
	}
	if m.MaxSandboxSeries != 0 {
		if m.MaxSandboxSeries < 1 || m.MaxSandboxSeries > 10000 {
			errs = append(errs, fmt.Errorf("metrics.max_sandbox_series %d must be from 1 to 10000 (0: 500)", m.MaxSandboxSeries))
		}
		s.MaxSandboxSeries = m.MaxSandboxSeries
	}
	return s, errs
}

// Console sets the web console.
type Console struct {
	// Enabled serves the console at / of the node's listeners (default true). Off, those
	// listeners serve the API alone, and an exposed port's answers on them no longer carry
	// the sandbox Content-Security-Policy that keeps a sandbox's page away from the
	// console's origin (its own cookies and storage then work there).
	Enabled bool `yaml:"enabled"`
}
