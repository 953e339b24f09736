package oci

import "testing"

func TestAgentProcs(t *testing.T) {
	for _, tt := range []struct {
		cpu  float64
		want int
	}{{0, 0}, {0.25, 1}, {1, 1}, {1.5, 2}, {4, 4}} {
		if got := agentProcs(tt.cpu); got != tt.want {
			t.Errorf("agentProcs(%v) = %d, want %d", tt.cpu, got, tt.want)
		}
	}
}
