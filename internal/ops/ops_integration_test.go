package ops

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/pgtest"
	_ "github.com/walpost/walpost/internal/publish/file" // the tests' sink; cmd/cdc registers it by importing it
	"github.com/walpost/walpost/internal/relaytest"
	"github.com/walpost/walpost/internal/store"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// source is an outbox with its slot and state tables (as cdc init makes
// them) and a file sink "out".
type source struct {
	url, out, dlq string
	cfg           *config.Config
	t             store.Tables
}

func newSource(t *testing.T) *source {
	t.Helper()
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	path := ob.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s}", out), "")
	dlq := relaytest.WithDeadLetterTable(t, url, path)
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	s := &source{url: url, out: out, dlq: dlq, cfg: cfg, t: store.TablesOf(cfg)}
	if _, err := store.Setup(context.Background(), pgtest.Connect(t, url), s.t); err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, url, fmt.Sprintf("SELECT pg_create_logical_replication_slot('%s', 'pgoutput')", ob.Slot))
	return s
}

func (s *source) open(t *testing.T) *Room {
	t.Helper()
	r, err := Open(context.Background(), s.cfg, Options{Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

func msgAt(n int, key string) *message.Message {
	m := relaytest.NewMsg("t", key, n)
	return &message.Message{ID: m.ID, Type: "t", Key: key, HasKey: true, Payload: []byte(m.Payload), PayloadJSON: true,
		LSN: pglogrepl.LSN(0x100 * n), CommitLSN: pglogrepl.LSN(0x100*n + 8)}
}

// TestIntegrationRoomShowsAHeldKeysHeadAndReleasesItInOrder: a key held
// behind a refused message: Status shows the key with its head row,
// Parked lists the three rows with their refs, and Release (the head
// found by its key) sends them in order and releases the key; Drop of
// another row by its ref deletes it, and a ref that names nothing is
// refused before anything is done.
func TestIntegrationRoomShowsAHeldKeysHeadAndReleasesItInOrder(t *testing.T) {
	t.Parallel()
	s := newSource(t)
	ctx := context.Background()
	d := store.NewDeadLetter(s.url, s.t)
	defer d.Close()
	head, next, last, other := msgAt(1, "k1"), msgAt(2, "k1"), msgAt(3, "k1"), msgAt(4, "k2")
	if err := d.ParkRefusedHead(ctx, "out", head, errors.New("out: 400 refused")); err != nil {
		t.Fatal(err)
	}
	for _, m := range []*message.Message{next, last} {
		if held, err := d.ParkBehind(ctx, "out", m); err != nil || !held {
			t.Fatalf("ParkBehind: %v, %v", held, err)
		}
	}
	if err := d.ParkRefused(ctx, "out", other, errors.New("out: 400 refused")); err != nil {
		t.Fatal(err)
	}
	r := s.open(t)
	st, err := r.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.HeldKeys) != 1 || st.HeldKeys[0].Key != "k1" || st.HeldKeys[0].Messages != 3 || st.HeldKeys[0].Head == nil ||
		*st.HeldKeys[0].Head.ID != head.ID || st.HeldKeys[0].HeadID != head.ID {
		t.Fatalf("held keys %+v, want k1 with 3 messages behind %s, its row shown", st.HeldKeys, head.ID)
	}
	if dl := st.DeadLetters; dl.Total != 4 || dl.Held != 2 || dl.Refused["out"] != 2 || dl.Unmappable != 0 {
		t.Fatalf("dead letters %+v, want 4: 2 refused by out, 2 held", dl)
	}
	msgs, err := r.Parked(ctx, Filter{})
	if err != nil || len(msgs) != 4 || msgs[0].Ref != "out|"+head.LSN.String() {
		t.Fatalf("Parked: %+v, %v; want 4 rows, the head first", msgs, err)
	}
	if _, err := r.Act(ctx, Action{Kind: Drop, Select: Filter{Refs: []string{"out|0/1"}}}, nil); !errors.Is(err, ErrBadAction) {
		t.Fatalf("drop of a ref that names nothing: %v, want ErrBadAction", err)
	}
	res, err := r.Act(ctx, Action{Kind: Release, Sink: "out", Key: "k1"}, nil)
	if err != nil || res.Failed != 0 || len(res.Outcomes) != 3 || len(res.Released) != 1 || res.Released[0] != "out|k1" {
		t.Fatalf("release: %+v, %v; want 3 resent and out|k1 released", res, err)
	}
	lines := relaytest.ReadLines(t, s.out)
	if len(lines) != 3 || lines[0].ID != head.ID || lines[1].ID != next.ID || lines[2].ID != last.ID {
		t.Fatalf("the file sink got %+v, want k1's three messages in order", lines)
	}
	res, err = r.Act(ctx, Action{Kind: Drop, Select: Filter{Refs: []string{msgs[3].Ref}}}, nil)
	if err != nil || len(res.Outcomes) != 1 || res.Outcomes[0].Result != "dropped" {
		t.Fatalf("drop of %s: %+v, %v", msgs[3].Ref, res, err)
	}
	if st, err := r.Status(ctx); err != nil || len(st.HeldKeys) != 0 || st.DeadLetters.Total != 3 {
		t.Fatalf("after the release: %+v, %v; want no held key and the 3 resent rows", st, err)
	}
}

// TestIntegrationReadingChangesNothing: a dead-letter table of an older
// walpost, owned by the role the Room connects as (so that an upgrade
// would succeed): Status says to run cdc init, Parked refuses with an
// error naming cdc init, and the table is left as it was: no view runs
// DDL. Once cdc init upgraded it (store.Setup), a read-only role (every
// transaction read-only) reads both views.
func TestIntegrationReadingChangesNothing(t *testing.T) {
	t.Parallel()
	s := newSource(t)
	ctx := context.Background()
	pgtest.Exec(t, s.url, "DROP TABLE "+s.dlq, fmt.Sprintf(`CREATE TABLE %s (slot text NOT NULL, lsn pg_lsn NOT NULL, sink text NOT NULL DEFAULT '',
		commit_lsn pg_lsn NOT NULL, message_id text, error text NOT NULL, row_data jsonb NOT NULL, parked_at timestamptz NOT NULL DEFAULT now(),
		PRIMARY KEY (slot, lsn, sink))`, s.dlq))
	r := s.open(t)
	st, err := r.Status(ctx)
	if err != nil || !strings.Contains(strings.Join(st.Warnings, "\n"), "run cdc init") {
		t.Fatalf("Status on an older table: %v, warnings %q; want one naming cdc init", err, st.Warnings)
	}
	if _, err := r.Parked(ctx, Filter{}); !errors.Is(err, store.ErrUpgrade) || !strings.Contains(err.Error(), "cdc init") {
		t.Fatalf("Parked on an older table: %v, want an error naming cdc init", err)
	}
	old, err := store.Outdated(ctx, pgtest.Connect(t, s.url), s.t)
	if err != nil || len(old) != 1 {
		t.Fatalf("after the views the table lacks %v (%v): a view upgraded it", old, err)
	}
	if _, err := store.Setup(ctx, pgtest.Connect(t, s.url), s.t); err != nil {
		t.Fatal(err)
	}
	role := pgtest.Name(t, "reader")
	pgtest.Exec(t, s.url, fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD 'pw' IN ROLE pg_read_all_data, pg_read_all_settings, pg_monitor", role),
		fmt.Sprintf("ALTER ROLE %s SET default_transaction_read_only = on", role))
	t.Cleanup(func() { pgtest.Exec(t, s.url, "DROP ROLE "+role) })
	cfg := *s.cfg
	cfg.Postgres.URL = strings.Replace(s.url, "postgres@", role+":pw@", 1)
	ro, err := Open(ctx, &cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if _, err := ro.Status(ctx); err != nil {
		t.Fatalf("Status as a read-only role: %v", err)
	}
	if _, err := ro.Parked(ctx, Filter{}); err != nil {
		t.Fatalf("Parked as a read-only role: %v", err)
	}
}
