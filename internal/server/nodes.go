package server

import (
	"net/http"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/membership"
)

func (s *Server) listNodes(w http.ResponseWriter, r *http.Request) error {
	nodes, err := s.m.Nodes(r.Context())
	if err != nil {
		return err
	}
	out := api.NodeList{Nodes: make([]api.Node, 0, len(nodes))}
	for _, n := range nodes {
		out.Nodes = append(out.Nodes, toAPINode(n))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) drainNode(w http.ResponseWriter, r *http.Request) error {
	return s.setDraining(w, r, true)
}
func (s *Server) readyNode(w http.ResponseWriter, r *http.Request) error {
	return s.setDraining(w, r, false)
}

func (s *Server) setDraining(w http.ResponseWriter, r *http.Request, draining bool) error {
	n, err := s.m.SetNodeDraining(r.Context(), r.PathValue("name"), draining)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toAPINode(n))
	return nil
}

func toAPINode(n membership.NodeInfo) api.Node {
	return api.Node{Name: n.Name, State: string(n.State), Address: n.Address, Self: n.Self,
		Capacity: api.Resources(n.Capacity), Reserved: api.Resources(n.Reserved), Epoch: n.Epoch, Labels: n.Labels, Runtimes: n.Runtimes,
		LeaseExpires: n.LeaseExpires, StartedAt: n.StartedAt, RenewedAt: n.RenewedAt}
}
