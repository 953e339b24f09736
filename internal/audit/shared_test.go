package audit

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/airlockhq/airlock/internal/store/postgres"
	"github.com/airlockhq/airlock/internal/store/postgres/pgtest"
)

// TestTwoChainsOneStore: two nodes' chains, each opened on its own connection pool to
// one PostgreSQL database, append at once, singly and in held batches; their records
// form one chain that verifies, and each chain's own Verify sees the other's records.
func TestTwoChainsOneStore(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.Start(t).CreateDatabase(t)
	var chains [2]*Chain
	for i := range chains {
		st, err := postgres.Open(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		if chains[i], err = OpenChain(ctx, st, testKey); err != nil {
			t.Fatal(err)
		}
	}
	const each = 40
	var wg sync.WaitGroup
	errs := make(chan error, 2*each)
	for n, c := range chains {
		for i := range each {
			wg.Go(func() {
				e := Entry{Identity: fmt.Sprintf("node-%d", n), Action: "exec", Result: "ok"}
				if i%2 == 0 {
					errs <- c.Append(ctx, e)
					return
				}
				hold := Hold(ctx)
				Holding(hold)
				if err := c.Append(hold, e); err != nil {
					errs <- err
					return
				}
				errs <- c.Release(hold, Entry{Identity: e.Identity, Action: "POST /v1/sandboxes/{ref}/exec", Result: "ok"})
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("append: %v", err)
		}
	}
	for n, c := range chains {
		if err := c.Healthy(); err != nil {
			t.Fatalf("chain %d unhealthy: %v", n, err)
		}
	}
	res, err := Verify(ctx, chains[0].st, testKey)
	if err != nil || !res.OK || res.Records != 3*each {
		t.Fatalf("verify: %+v, %v; want %d records, OK", res, err, 3*each)
	}
	for n, c := range chains {
		if res, err := c.Verify(ctx); err != nil || !res.OK {
			t.Fatalf("chain %d's verify: %+v, %v", n, res, err)
		}
	}
}
