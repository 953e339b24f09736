package oci

// IdleAgentConns is how many connections to id's agent the driver keeps unused.
func (d *Driver) IdleAgentConns(id string) int {
	v, ok := d.kept.Load(id)
	if !ok {
		return 0
	}
	return v.(*keptConns).pool.Idle()
}
