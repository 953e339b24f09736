package sandboxlink

// Traffic is what a sandbox's link has carried, as the host kernel counts it on the
// host side of its veth and from the sandbox's point of view: RxBytes came in to the
// sandbox, TxBytes went out of it.
type Traffic struct {
	RxBytes, TxBytes uint64
}

// Counters reads the traffic of every sandbox's link in one dump of the host
// namespace's links, by sandbox id. Nothing inside a sandbox can change these counts
// but by sending or receiving.
func (m *Manager) Counters() (map[string]Traffic, error) {
	links, err := m.ourLinks()
	if err != nil {
		return nil, err
	}
	out := make(map[string]Traffic, len(links))
	for id, l := range links {
		if st := l.Attrs().Statistics; st != nil {
			// The host side receives what the sandbox sends.
			out[id] = Traffic{RxBytes: st.TxBytes, TxBytes: st.RxBytes}
		}
	}
	return out, nil
}
