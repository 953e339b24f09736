package audit

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/store/sqlite"
)

// BenchmarkVerifyMillion times Verify over a log of 1,000,000 records (the target is
// under 10 s). The log is built once, in batches, before the timer starts.
func BenchmarkVerifyMillion(b *testing.B) {
	ctx := context.Background()
	st, err := sqlite.Open(filepath.Join(b.TempDir(), "db"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	const total, batch = 1_000_000, 20_000
	prev, t0 := "", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for seq := int64(1); seq <= total; {
		recs := make([]*store.AuditRecord, 0, batch)
		for ; len(recs) < batch && seq <= total; seq++ {
			e := Entry{Time: t0.Add(time.Duration(seq) * time.Millisecond), Identity: "alice", Action: "exec",
				Sandbox: "sb_0123456789abcdef", Result: "succeeded", Detail: map[string]any{"argv": []string{"python3", "main.py"}, "exit_code": 0}}
			doc, _ := json.Marshal(e)
			r := &store.AuditRecord{Seq: seq, Time: e.Time, Identity: e.Identity, Action: e.Action, Sandbox: e.Sandbox, Doc: doc, Prev: prev}
			r.Hash = hashOf(testKey, r.Prev, r.Seq, r.Time, r.Identity, r.Action, r.Sandbox, r.Doc)
			prev = r.Hash
			recs = append(recs, r)
		}
		if err := st.AppendAudit(ctx, recs, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		res, err := Verify(ctx, st, testKey)
		if err != nil || !res.OK || res.Records != total {
			b.Fatalf("verify: %+v, %v", res, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Seconds())/float64(b.N), "s/verify")
}
