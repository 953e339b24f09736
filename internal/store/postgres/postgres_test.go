package postgres

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/store/postgres/pgtest"
	"github.com/airlockhq/airlock/internal/store/storetest"
)

// openTest opens a store on dsn and closes it when the test ends.
func openTest(t *testing.T, dsn string) *Store {
	t.Helper()
	s, err := Open(t.Context(), dsn)
	if err != nil {
		t.Fatalf("Open: got error %v, want none", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	srv := pgtest.Start(t)
	// Each subtest gets a new database; a second open in the same subtest (the re-open
	// check) reaches the same one.
	var mu sync.Mutex
	dbs := map[string]string{}
	storetest.Run(t, func(t *testing.T) store.Store {
		mu.Lock()
		dsn, ok := dbs[t.Name()]
		if !ok {
			dsn = srv.CreateDatabase(t)
			dbs[t.Name()] = dsn
		}
		mu.Unlock()
		return openTest(t, dsn)
	})
}

// TestMigrateOnceConcurrently opens one fresh database from many nodes at once: every
// open succeeds, and each migration is recorded once.
func TestMigrateOnceConcurrently(t *testing.T) {
	srv := pgtest.Start(t)
	dsn := srv.CreateDatabase(t)
	const nodes = 8
	errs := make([]error, nodes)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Go(func() {
			<-start
			s, err := Open(t.Context(), dsn)
			if err == nil {
				s.Close()
			}
			errs[i] = err
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Open #%d of %d at once: got error %v, want none", i, nodes, err)
		}
	}

	ms, err := store.LoadMigrations(migrationFS, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var rows, versions, maxVersion int
	if err := conn.QueryRow(t.Context(), `SELECT count(*), count(DISTINCT version), coalesce(max(version), 0) FROM schema_version`).
		Scan(&rows, &versions, &maxVersion); err != nil {
		t.Fatal(err)
	}
	if rows != len(ms) || versions != len(ms) || maxVersion != len(ms) {
		t.Errorf("schema_version after %d opens: got %d rows of %d versions up to %d, want each of the %d migrations once",
			nodes, rows, versions, maxVersion, len(ms))
	}
}

// TestNewerSchemaRefused checks that a binary refuses a database migrated past what it
// knows, and changes nothing.
func TestNewerSchemaRefused(t *testing.T) {
	srv := pgtest.Start(t)
	dsn := srv.CreateDatabase(t)
	openTest(t, dsn).Close()
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), `INSERT INTO schema_version (version, applied_at) VALUES (999, 'later')`); err != nil {
		t.Fatal(err)
	}
	_, err = Open(t.Context(), dsn)
	if err == nil || !strings.Contains(err.Error(), "newer than this binary") {
		t.Errorf("Open of a database at schema version 999: got error %v, want one saying it is newer than this binary", err)
	}
}

// TestPasswordNeverInErrors checks that a DSN's password is in no error Open returns,
// whether the DSN cannot be read, the server refuses it or no server answers.
func TestPasswordNeverInErrors(t *testing.T) {
	srv := pgtest.Start(t)
	const pw = "hunter2-secret"
	good := srv.DSN("postgres")
	wrong := strings.Replace(good, srv.Password(), pw, 1)
	for _, tc := range []struct{ name, dsn string }{
		{"unreadable", "postgres://airlock:" + pw + "@127.0.0.1:notaport/db"},
		{"wrong password", wrong},
		{"password parameter", wrong + "&password=" + pw},
		{"key=value", "host=127.0.0.1 port=1 user=airlock password=" + pw + " connect_timeout=2"},
		{"nobody listening", "postgres://airlock:" + pw + "@127.0.0.1:1/db?connect_timeout=2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(t.Context(), tc.dsn)
			if err == nil {
				s.Close()
				t.Fatalf("Open: got no error, want one")
			}
			if strings.Contains(err.Error(), pw) {
				t.Errorf("Open: got error %q, which holds the password", err)
			}
		})
	}
	for _, tc := range []struct{ dsn, want string }{
		{"postgres://u:" + pw + "@h:5432/db?sslmode=require", "postgres://u:xxxxx@h:5432/db?sslmode=require"},
		{"postgres://u@h/db?password=" + pw, "postgres://u@h/db?password=xxxxx"},
		{"postgresql://h/db", "postgresql://h/db"},
		{"host=h password=" + pw, "(a key=value DSN)"},
	} {
		if got := Redact(tc.dsn); got != tc.want {
			t.Errorf("Redact(%q): got %q, want %q", tc.dsn, got, tc.want)
		}
	}
	s := openTest(t, good)
	if got := s.String(); strings.Contains(got, srv.Password()) || !strings.Contains(got, "xxxxx") {
		t.Errorf("String(): got %q, want the DSN with its password replaced by xxxxx", got)
	}
}

// TestEventsVisibleInSeqOrder: a reader that pages through events by seq while writers
// append sees every event; none becomes visible below a seq already read.
func TestEventsVisibleInSeqOrder(t *testing.T) {
	srv := pgtest.Start(t)
	s := openTest(t, srv.CreateDatabase(t))
	ctx := t.Context()
	const writers, each = 8, 150
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				ev := &store.Event{SandboxID: fmt.Sprintf("sb_%d", w), Type: "tick", Time: time.Now(), Generation: int64(i)}
				if errs[w] = s.AppendEvents(ctx, []*store.Event{ev, {SandboxID: ev.SandboxID, Type: "tock", Time: ev.Time}}); errs[w] != nil {
					return
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	seen, after := 0, int64(0)
	for finished := false; ; {
		select {
		case <-done:
			finished = true
		default:
		}
		page, err := s.ListEvents(ctx, store.EventFilter{AfterSeq: after})
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range page {
			seen++
			after = ev.Seq
		}
		if finished && len(page) == 0 {
			break
		}
	}
	for w, err := range errs {
		if err != nil {
			t.Errorf("writer %d: %v", w, err)
		}
	}
	if want := writers * each * 2; seen != want {
		t.Errorf("a reader paging by seq during appends saw %d events, want all %d", seen, want)
	}
}
