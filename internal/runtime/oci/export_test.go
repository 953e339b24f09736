package oci

// IdleAgentConns is how many connections to id's agent the driver keeps unused.
func (d *Driver) IdleAgentConns(id string) int {
	v, ok := d.kept.Load(id)
	if !ok {
		return 0
	}
	return v.(*keptConns).pool.Idle()
}

// DropAgentConns closes the connections kept to id's agent, the one dialled ahead
// after its start included.
func (d *Driver) DropAgentConns(id string) { d.dropKept(id) }
