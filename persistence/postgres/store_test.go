package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/a2-runtime/a2/persistence"
	"github.com/a2-runtime/a2/persistence/storetest"
	"github.com/a2-runtime/a2/protocol"
)

// testURL returns the URL of the test server, or skips the test.
func testURL(t testing.TB) string {
	t.Helper()
	url := os.Getenv("A2_TEST_POSTGRES_URL")
	if url == "" {
		t.Skip("set A2_TEST_POSTGRES_URL=postgres://... to run the PostgreSQL store tests; .ci/run starts a throwaway server")
	}
	if why := os.Getenv("A2_POSTGRES_TESTED"); why != "" {
		t.Skipf("A2_POSTGRES_TESTED is set (%s): unset it to run this test again", why)
	}
	return url
}

// newSchema creates a uniquely named schema for one test and drops it at
// cleanup, so that every test starts from an empty database.
func newSchema(t testing.TB, url string) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "a2test_" + hex.EncodeToString(b[:])
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create schema %s: %v", schema, err)
	}
	t.Cleanup(func() {
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Errorf("connect to drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return schema
}

// openStore opens a store on schema with opts and closes it at cleanup.
func openStore(t testing.TB, url, schema string, opts Options) *Store {
	t.Helper()
	opts.Schema = schema
	s, err := Open(context.Background(), url, opts)
	if err != nil {
		t.Fatalf("Open(schema %s): %v", schema, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestConformance runs the Store conformance suite, each case on a fresh
// schema; Reopen opens a new Store on the same schema. It runs with
// notifications off (the default) and on.
func TestConformance(t *testing.T) {
	for _, notify := range []bool{false, true} {
		t.Run(fmt.Sprintf("notify=%v", notify), func(t *testing.T) { conformance(t, notify) })
	}
}

func conformance(t *testing.T, notify bool) {
	url := testURL(t)
	var mu sync.Mutex
	schemas := map[persistence.Store]string{}
	open := func(t *testing.T, schema string) persistence.Store {
		s := openStore(t, url, schema, Options{PollInterval: 100 * time.Millisecond, Notify: notify})
		mu.Lock()
		schemas[s] = schema
		mu.Unlock()
		return s
	}
	storetest.Run(t, storetest.Factory{
		Open: func(t *testing.T) persistence.Store { return open(t, newSchema(t, url)) },
		Reopen: func(t *testing.T, closed persistence.Store) persistence.Store {
			mu.Lock()
			schema, ok := schemas[closed]
			mu.Unlock()
			if !ok {
				t.Fatal("Reopen of a store this factory did not open")
			}
			return open(t, schema)
		},
	})
}

// TestMigrationsConcurrentAndIdempotent opens several stores on one new
// schema at once (nodes starting together), then once more: every Open
// succeeds and each migration is recorded once.
func TestMigrationsConcurrentAndIdempotent(t *testing.T) {
	url := testURL(t)
	schema := newSchema(t, url)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			s, err := Open(t.Context(), url, Options{Schema: schema})
			if err != nil {
				errs <- err
				return
			}
			errs <- s.Close()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent Open: %v", err)
		}
	}
	s := openStore(t, url, schema, Options{})
	var n, versions int
	if err := s.pool.QueryRow(t.Context(), "SELECT count(*), count(DISTINCT version) FROM schema_migrations").Scan(&n, &versions); err != nil {
		t.Fatalf("read schema_migrations: %v", err)
	}
	files, err := fs.Glob(migrationFiles, "migrations/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	if n != len(files) || versions != len(files) {
		t.Fatalf("schema_migrations has %d rows, %d versions; want one of each of the %d migrations", n, versions, len(files))
	}
}

// TestPayloadBytesKept checks that payload bytes come back exactly as
// given, whitespace and key order included (bytea, not jsonb).
func TestPayloadBytesKept(t *testing.T) {
	url := testURL(t)
	s := openStore(t, url, newSchema(t, url), Options{})
	payload := []byte("{ \"b\" : 1,\n \"a\":[ 1.50, \"\u00e9\" ] }")
	if _, err := s.Append(t.Context(), "s1", 0, []protocol.Event{{ID: "e1", Type: "t", Payload: payload}}); err != nil {
		t.Fatalf("Append: %v", err)
	}
	got, err := s.Read(t.Context(), "s1", 0, 10)
	if err != nil || len(got) != 1 || string(got[0].Payload) != string(payload) {
		t.Fatalf("Read = %v, %v; want the payload %q byte for byte", got, err, payload)
	}
}

// TestBadURL checks that Open reports an unparsable URL as ErrInvalid and
// an unreachable server as a connection error, without hanging.
func TestBadURL(t *testing.T) {
	if _, err := Open(t.Context(), "postgres://%zz", Options{}); !errors.Is(err, persistence.ErrInvalid) {
		t.Fatalf("Open(bad URL) = %v, want ErrInvalid", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err := Open(ctx, "postgres://nobody@127.0.0.1:1/none?sslmode=disable&connect_timeout=2", Options{})
	if err == nil {
		t.Fatal("Open of a closed port succeeded")
	}
}
