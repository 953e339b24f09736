package config

import (
	"strings"
	"testing"
	"time"
)

func TestSettingsAreTypedOnce(t *testing.T) {
	s, err := Default().Settings()
	if err != nil {
		t.Fatal(err)
	}
	if s.DefaultMemory != 1<<30 || s.ExecOutputBudget != 64<<20 || s.MaxLifetime != 8*time.Hour ||
		s.AuditCoalesce != 10*time.Second || s.MemoryTarget != 192<<20 || s.ImageQuota != 20<<30 {
		t.Errorf("default settings %+v", s)
	}
	c := Default()
	c.DefaultLimits.Memory, c.MaxLifetime, c.Audit.EventMaxAge = "lots", "30s", "1m"
	if _, err := c.Settings(); err == nil ||
		!strings.Contains(err.Error(), "default_limits.memory") || !strings.Contains(err.Error(), "max_lifetime") ||
		!strings.Contains(err.Error(), "audit.event_max_age") {
		t.Errorf("a config with three bad values: %v; want each named", err)
	}
	c = Default()
	c.DefaultLimits.Disk = "1GB"
	if s, err := c.Settings(); err != nil || s.DefaultDisk != 1<<30 {
		t.Errorf("1GB: %d, %v; want 1GiB, as docker reads it", s.DefaultDisk, err)
	}
}
