package server

import (
	"net/http"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/manager"
)

func (s *Server) listPools(w http.ResponseWriter, r *http.Request) error {
	pools, err := s.m.Pools(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.PoolList{Pools: toAPIPools(pools)})
	return nil
}

func (s *Server) putPool(w http.ResponseWriter, r *http.Request) error {
	var req api.PoolRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	l := req.Limits
	p, err := s.m.SetPool(r.Context(), manager.Call{Owner: owner(r), Admin: isAdmin(r)}, manager.PoolRequest{
		Name: r.PathValue("name"), Image: req.Image, Runtime: req.Runtime, Network: req.Network, Size: req.Size,
		Limits: manager.Limits{CPU: l.CPU, Memory: l.Memory, PIDs: l.PIDs, OpenFiles: l.OpenFiles, Disk: l.Disk}})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toAPIPools([]manager.PoolInfo{*p})[0])
	return nil
}

func (s *Server) deletePool(w http.ResponseWriter, r *http.Request) error {
	if err := s.m.DeletePool(r.Context(), r.PathValue("name")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func toAPIPools(pools []manager.PoolInfo) []api.Pool {
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	out := make([]api.Pool, 0, len(pools))
	for _, p := range pools {
		l := p.Limits
		out = append(out, api.Pool{Name: p.Name, Image: p.Image, ImageDigest: p.ImageDigest, Runtime: p.Runtime,
			Limits:  api.Limits{CPU: l.CPU, Memory: l.Memory, PIDs: l.PIDs, OpenFiles: l.OpenFiles, Disk: l.Disk},
			Network: p.NetworkMode, Size: p.Size, Ready: p.Ready, Hits: p.Hits, Misses: p.Misses,
			RefillLastMS: ms(p.RefillLast), RefillAvgMS: ms(p.RefillAvg)})
	}
	return out
}
