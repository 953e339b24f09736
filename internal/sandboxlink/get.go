package sandboxlink

import "os"

// Get describes the network a sandbox already has: the link this manager made, or
// found again at New after a restart. ok is false when the sandbox has none.
func (m *Manager) Get(id string) (sb *Sandbox, ok bool) {
	if validID(id) != nil {
		return nil, false
	}
	path := m.cfg.netnsPath(id)
	if _, err := os.Stat(path); err != nil {
		return nil, false
	}
	sb = &Sandbox{ID: id, NetnsPath: path, Mode: ModeNone}
	m.mu.RLock()
	defer m.mu.RUnlock()
	for i, owner := range m.slots {
		if owner == id {
			sb.HostAddr, sb.SandboxAddr = m.cfg.slotAddrs(i)
			sb.HostIf, sb.SandboxIf = m.cfg.hostIfName(sb.HostAddr), sandboxIf
			sb.Mode = "egress"
		}
	}
	return sb, true
}

// RemoveRules deletes this node's nftables table. Only for a node that is going away
// for good with no sandbox left (tests); a restarting daemon keeps its table.
func (m *Manager) RemoveRules() error {
	m.mu.Lock()
	m.retired = true // Repair must not put it back
	m.mu.Unlock()
	c, err := m.nft()
	if err != nil {
		return err
	}
	c.DelTable(m.table())
	return c.Flush()
}

// TableName is the name of the node's nftables table (inet family).
func (m *Manager) TableName() string { return m.table().Name }
