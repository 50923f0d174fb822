package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/relaytest"
	"github.com/walpost/walpost/internal/store"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

func loadConfig(t *testing.T, path string) *config.Config {
	t.Helper()
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestIntegrationReplayStoppedBeforeTheFirstBatchGoesOnFromTheFirstRow:
// when stop has ended before the first batch is read, nothing is
// published and Next, the id to go on from, is the range's first row,
// which was not replayed (not the second).
func TestIntegrationReplayStoppedBeforeTheFirstBatchGoesOnFromTheFirstRow(t *testing.T) {
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	msgs := []relaytest.Msg{relaytest.NewMsg("t", "k", 1), relaytest.NewMsg("t", "k", 2), relaytest.NewMsg("t", "k", 3)}
	ob.InsertTx(t, pgtest.Connect(t, url), msgs...)
	cfg := loadConfig(t, ob.Config(t, "  - {name: d, kind: discard}", ""))
	stop, cancel := context.WithCancel(context.Background())
	cancel()
	res, err := Replay(stop, context.Background(), cfg, Options{FromID: msgs[0].ID, Progress: io.Discard, Log: zerolog.Nop()})
	if !errors.Is(err, ErrInterrupted) || res.Rows != 0 || res.Next != msgs[0].ID || res.End != msgs[2].ID {
		t.Fatalf("Replay stopped before the first batch: %+v, %v; want ErrInterrupted, no row done, next %s, end %s", res, err, msgs[0].ID, msgs[2].ID)
	}
}

// TestIntegrationResendGoesOnWhenTheTableCannotBeRead: a row that could
// not be mapped needs the outbox table's column types; when they cannot
// be read, that row fails with the reason and the parked rows after it
// are resent all the same.
func TestIntegrationResendGoesOnWhenTheTableCannotBeRead(t *testing.T) {
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	path := ob.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s}", out), "")
	relaytest.WithDeadLetterTable(t, url, path)
	cfg := loadConfig(t, path)
	conn := pgtest.Connect(t, url)
	ctx := context.Background()
	if _, err := store.Setup(ctx, conn, store.TablesOf(cfg)); err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, url, "ALTER TABLE "+ob.Table+" DROP COLUMN headers")

	unmappable := relaytest.NewMsg("t", "k", 1)
	refused := &message.Message{ID: relaytest.NewMsg("t", "k", 2).ID, Type: "t", Payload: []byte(`{"n": 2}`), PayloadJSON: true,
		LSN: pglogrepl.LSN(0x20), CommitLSN: pglogrepl.LSN(0x28)}
	values, _ := json.Marshal(map[string]string{"id": unmappable.ID, "type": "", "payload": unmappable.Payload})
	parked := []store.Parked{
		{ID: unmappable.ID, LSN: 0x10, CommitLSN: 0x18, RowData: values},
		{ID: refused.ID, LSN: refused.LSN, CommitLSN: refused.CommitLSN, Sink: "out", RowData: bytes.TrimSpace(publish.AppendJSONLine(nil, refused))},
	}
	var outcomes []Outcome
	failed, err := Resend(ctx, cfg, parked, zerolog.Nop(), func(o Outcome) { outcomes = append(outcomes, o) })
	if err != nil || failed != 1 || len(outcomes) != 2 {
		t.Fatalf("Resend: %d failed, %v, outcomes %+v; want 1 failed of 2, no error", failed, err, outcomes)
	}
	if e := outcomes[0].Err; e == nil || !strings.Contains(e.Error(), `reading the type of columns.headers "headers"`) {
		t.Fatalf("the unmappable row: %v, want the column types' error", e)
	}
	if outcomes[1].Err != nil {
		t.Fatalf("the refused message after it: %v, want resent", outcomes[1].Err)
	}
	if lines := relaytest.ReadLines(t, out); len(lines) != 1 || lines[0].ID != refused.ID {
		t.Fatalf("the file sink got %+v, want %s alone", lines, refused.ID)
	}
}
