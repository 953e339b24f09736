package store

import (
	"maps"
	"slices"
)

// Clone returns a copy of sb that shares nothing with it: a store that keeps decoded
// records hands out clones, and callers change the records they get.
func (sb *Sandbox) Clone() *Sandbox {
	c := *sb
	c.Env = maps.Clone(sb.Env)
	c.Labels = maps.Clone(sb.Labels)
	c.NodeSelector = maps.Clone(sb.NodeSelector)
	c.Network.Allow = slices.Clone(sb.Network.Allow)
	c.Network.AllowPrivate = slices.Clone(sb.Network.AllowPrivate)
	if sb.Workspace != nil {
		ws := *sb.Workspace
		c.Workspace = &ws
	}
	c.Ports = slices.Clone(sb.Ports)
	c.Volumes = slices.Clone(sb.Volumes)
	c.Extra = slices.Clone(sb.Extra)
	return &c
}
