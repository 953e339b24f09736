package manager

import (
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// BenchmarkResumeElsewhere measures a resume that moves a suspended sandbox with 100 MiB
// of files (random, so nothing is shared with an earlier round) to another node: the
// claim, fetching and verifying its chunks from the bucket (SeaweedFS), rebuilding its
// layer and starting it. Its source node is drained in between; the suspend's upload is
// not timed. Reported: p50-ms and p90-ms of the resumes.
func BenchmarkResumeElsewhere(b *testing.B) {
	ctx := context.Background()
	c := newClusterSized(b, 48)
	nodes := []*clusterNode{c.node(b, "node-a", b.TempDir()), c.node(b, "node-b", b.TempDir())}
	blob := make([]byte, 100<<20)
	var took []time.Duration
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		src, dst := nodes[i%2], nodes[(i+1)%2]
		_, sb, err := src.Create(ctx, alice, CreateRequest{Name: "big"})
		if err != nil {
			b.Fatal(err)
		}
		rand.Read(blob)
		p := src.drv.Path(sb.ID, "/data/blob")
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, blob, 0o644); err != nil {
			b.Fatal(err)
		}
		if _, sb, err = src.Suspend(ctx, alice, "big"); err != nil || sb.Files == "" {
			b.Fatalf("suspend: %v (files %q)", err, sb.Files)
		}
		if _, err := dst.SetNodeDraining(ctx, src.cfg.NodeName, true); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		_, moved, err := dst.Resume(ctx, alice, "big")
		took = append(took, time.Since(start))
		b.StopTimer()
		if err != nil || moved.Node != dst.cfg.NodeName {
			b.Fatalf("resume on %s: %v", dst.cfg.NodeName, err)
		}
		if st, err := os.Stat(dst.drv.Path(sb.ID, "/data/blob")); err != nil || st.Size() != int64(len(blob)) {
			b.Fatalf("the moved file: %v, %v", st, err)
		}
		if _, err := dst.SetNodeDraining(ctx, src.cfg.NodeName, false); err != nil {
			b.Fatal(err)
		}
		if _, _, err := dst.Terminate(ctx, alice, "big"); err != nil {
			b.Fatal(err)
		}
		dst.WaitCleanups(ctx)
		b.StartTimer()
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Milliseconds()), "p50-ms")
	b.ReportMetric(float64(took[len(took)*9/10].Milliseconds()), "p90-ms")
}
