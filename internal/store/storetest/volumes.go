package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/store"
)

// testVolumes: a name is unique per owner and kind, a record reads back as stored,
// lists are the owner's (and kind's), an update with a stale version is refused and
// changes nothing, and a deleted record is gone.
func testVolumes(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	s := open(t)
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	a := &store.Volume{ID: "vol_a", Kind: store.VolumeKindVolume, Owner: "alice", Name: "data", Node: "n1", Size: 1 << 30,
		KeyID: "k1", Key: []byte{1, 2, 3}, CreatedAt: at, UpdatedAt: at}
	if err := s.CreateVolume(ctx, a); err != nil {
		t.Fatalf("CreateVolume(vol_a): %v", err)
	}
	dup := &store.Volume{ID: "vol_b", Kind: store.VolumeKindVolume, Owner: "alice", Name: "data", CreatedAt: at}
	if err := s.CreateVolume(ctx, dup); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("a second volume named data: %v; want already exists", err)
	}
	for _, v := range []*store.Volume{
		{ID: "vol_c", Kind: store.VolumeKindVolume, Owner: "bob", Name: "data", CreatedAt: at.Add(time.Second)},
		{ID: "vsnap_d", Kind: store.VolumeKindSnapshot, Owner: "alice", Name: "vsnap_d", Source: "vol_a", CreatedAt: at.Add(2 * time.Second)},
	} {
		if err := s.CreateVolume(ctx, v); err != nil {
			t.Fatalf("CreateVolume(%s): %v", v.ID, err)
		}
	}
	got, err := s.GetVolumeByName(ctx, "alice", store.VolumeKindVolume, "data")
	if err != nil || got.ID != "vol_a" || got.Size != 1<<30 || string(got.Key) != "\x01\x02\x03" || got.Version != 1 || !got.CreatedAt.Equal(at) {
		t.Fatalf("GetVolumeByName(alice, data) = %+v, %v; want vol_a as stored", got, err)
	}
	// Half a second later: as text, "…:00.5Z" sorts before "…:00Z".
	late := &store.Volume{ID: "vol_e", Kind: store.VolumeKindVolume, Owner: "alice", Name: "late", CreatedAt: at.Add(500 * time.Millisecond)}
	if err := s.CreateVolume(ctx, late); err != nil {
		t.Fatalf("CreateVolume(vol_e): %v", err)
	}
	list, err := s.ListVolumes(ctx, "alice", store.VolumeKindVolume)
	if err != nil || len(list) != 2 || list[0].ID != "vol_a" || list[1].ID != "vol_e" {
		t.Fatalf("alice's volumes = %v, %v; want [vol_a vol_e], oldest first", list, err)
	}
	if all, _ := s.ListVolumes(ctx, "", ""); len(all) != 4 {
		t.Fatalf("every record: %d; want 4", len(all))
	}
	got.Attachments = []store.VolumeAttachment{{SandboxID: "sb_1", Path: "/data"}}
	if err := s.UpdateVolume(ctx, got); err != nil || got.Version != 2 {
		t.Fatalf("UpdateVolume: %v (version %d); want version 2", err, got.Version)
	}
	stale := *got
	stale.Version = 1
	stale.Attachments = nil
	if err := s.UpdateVolume(ctx, &stale); !errors.Is(err, errdefs.ErrVersionConflict) {
		t.Fatalf("a stale update: %v; want version conflict", err)
	}
	if again, _ := s.GetVolume(ctx, "vol_a"); len(again.Attachments) != 1 || again.Version != 2 {
		t.Fatalf("after a refused update: %+v; want the attachment kept at version 2", again)
	}
	if err := s.DeleteVolume(ctx, "vol_a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetVolume(ctx, "vol_a"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("a deleted volume: %v; want not found", err)
	}
	if err := s.DeleteVolume(ctx, "vol_a"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("deleting it again: %v; want not found", err)
	}
}
