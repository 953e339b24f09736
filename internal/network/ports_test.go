package network

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

func (n *Node) closeListeners() {
	for _, l := range n.lns {
		l.Close()
	}
	if n.udp != nil {
		n.udp.Close()
	}
}

// TestListenKeepsPorts: a node that starts again gets the ports it had, so sandboxes
// that kept running reach the proxy where their environment says; a port taken in the
// meantime is replaced, and the new choice remembered.
func TestListenKeepsPorts(t *testing.T) {
	dir := t.TempDir()
	first := &Node{opts: Options{Dir: dir}}
	if err := first.listen(0x1001); err != nil {
		t.Fatal(err)
	}
	first.closeListeners()
	got := first.ports
	if got.Proxy == 0 || got.HTTP == 0 || got.TLS == 0 || got.TCP == 0 || got.DNS == 0 {
		t.Fatalf("ports %+v: one is not set", got)
	}

	again := &Node{opts: Options{Dir: dir}}
	if err := again.listen(0x1001); err != nil {
		t.Fatal(err)
	}
	again.closeListeners()
	if again.ports != got {
		t.Fatalf("after a restart the ports are %+v, want the earlier %+v", again.ports, got)
	}

	// Someone else took the proxy's port.
	taken, err := net.Listen("tcp4", "0.0.0.0:"+strconv.Itoa(got.Proxy))
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	moved := &Node{opts: Options{Dir: dir}}
	if err := moved.listen(0x1001); err != nil {
		t.Fatal(err)
	}
	moved.closeListeners()
	if moved.ports.Proxy == got.Proxy || moved.ports.TLS != got.TLS || moved.ports.DNS != got.DNS {
		t.Fatalf("with the proxy port taken: ports %+v, want a new proxy port and the rest as %+v", moved.ports, got)
	}
	var saved ports
	b, err := os.ReadFile(filepath.Join(dir, "ports.json"))
	if err == nil {
		err = json.Unmarshal(b, &saved)
	}
	if err != nil || saved != moved.ports {
		t.Fatalf("ports.json holds %+v (%v), want %+v", saved, err, moved.ports)
	}
}
