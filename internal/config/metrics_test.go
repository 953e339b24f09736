package config

import (
	"os"
	"strings"
	"testing"
	"time"
)

// The metrics section defaults to a 10 s interval, 60 samples and no per-sandbox series,
// and bad values are refused naming the field and what is allowed.
func TestMetricsSetting(t *testing.T) {
	s, err := Default().Settings()
	if err != nil {
		t.Fatal(err)
	}
	if s.Metrics != (MetricsSetting{Interval: 10 * time.Second, History: 60, MaxSandboxSeries: 500}) {
		t.Errorf("defaults = %+v", s.Metrics)
	}
	for _, c := range []struct {
		m    Metrics
		want string
	}{
		{Metrics{Interval: "1ms"}, "metrics.interval"},
		{Metrics{Interval: "soon"}, "metrics.interval"},
		{Metrics{History: -1}, "metrics.history"},
		{Metrics{History: 100000}, "metrics.history"},
		{Metrics{MaxSandboxSeries: 20000}, "metrics.max_sandbox_series"},
	} {
		cfg := Default()
		cfg.Metrics = c.m
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v; want an error naming %s", c.m, err, c.want)
		}
	}
}

// The console is on unless the file turns it off.
func TestConsoleSwitch(t *testing.T) {
	if !Default().Console.Enabled {
		t.Errorf("the console is off by default; want on")
	}
	dir := t.TempDir()
	for body, want := range map[string]bool{"log_level: info\n": true, "console:\n  enabled: false\n": false} {
		p := dir + "/c.yaml"
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := Load(p)
		if err != nil {
			t.Fatal(err)
		}
		if c.Console.Enabled != want {
			t.Errorf("%q: console.enabled = %v, want %v", body, c.Console.Enabled, want)
		}
	}
}
