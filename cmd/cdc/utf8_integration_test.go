package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/relaytest"
)

// TestIntegrationInvalidUTF8IsAnInvalidRow: in a SQL_ASCII database text
// may hold any bytes. An outbox row whose type is not valid UTF-8 is an
// invalid row, handled by relay.on_invalid like any other, never published
// with its bytes raw or replaced: with stop the relay delivers what comes
// before it and exits with an error naming the column; with dead_letter it
// parks the row, bytes intact, and delivers the rest.
func TestIntegrationInvalidUTF8IsAnInvalidRow(t *testing.T) {
	t.Parallel()
	dbURL := sqlASCIIDatabase(t)

	// setup writes a good row, a row whose type is "bad\xff", and another
	// good row, in three transactions, after cdc init.
	setup := func(t *testing.T, onInvalid string) (ob relaytest.Outbox, cfg, out, dlq string, good []relaytest.Msg, badID string) {
		ob = relaytest.NewOutbox(t, dbURL)
		out = filepath.Join(t.TempDir(), "out.jsonl")
		cfg = ob.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s}", out), "relay: {on_invalid: "+onInvalid+"}")
		if onInvalid == "dead_letter" {
			dlq = relaytest.WithDeadLetterTable(t, dbURL, cfg)
		}
		cdcInit(t, cfg)
		conn := pgtest.Connect(t, dbURL)
		good = []relaytest.Msg{relaytest.NewMsg("good", "k", 1), relaytest.NewMsg("good", "k", 3)}
		badID = uuid.NewString()
		ob.InsertTx(t, conn, good[0])
		// E'\377' is the byte 0xff: SQL_ASCII takes it as it is.
		pgtest.Exec(t, dbURL, fmt.Sprintf(`INSERT INTO %s (id, type, key, payload) VALUES ('%s', E'bad\377', 'k', '{"n": 2}')`, ob.Table, badID))
		ob.InsertTx(t, conn, good[1])
		return ob, cfg, out, dlq, good, badID
	}
	const wantErr = `columns.type: column "type" is not valid UTF-8 (byte 0xff at offset 3)`

	t.Run("stop", func(t *testing.T) {
		t.Parallel()
		_, cfg, out, _, good, badID := setup(t, "stop")
		p := startCDC(t, "run", "--config", cfg)
		switch code := p.Wait(60 * time.Second); code {
		case -1:
			t.Fatalf("relay did not stop at the invalid row\n%s", p.Stderr.String())
		case 0:
			t.Fatalf("exit code 0, want an error\n%s", p.Stderr.String())
		}
		if log := p.Stderr.String(); !strings.Contains(log, strings.ReplaceAll(wantErr, `"`, `\"`)) || !strings.Contains(log, badID) {
			t.Fatalf("the relay's log does not name the column and the row's id (%s):\n%s", wantErr, log)
		}
		lines := relaytest.ReadLines(t, out)
		if len(lines) != 1 || lines[0].ID != good[0].ID {
			t.Fatalf("sink holds %+v; want only the good row before the invalid one (%s)", lines, good[0].ID)
		}
	})

	t.Run("dead_letter", func(t *testing.T) {
		t.Parallel()
		ob, cfg, out, dlq, good, badID := setup(t, "dead_letter")
		p := startCDC(t, "run", "--config", cfg)
		lines := relaytest.WaitAllDelivered(t, out, good, 60*time.Second, p.Stderr.String)
		for _, l := range lines {
			if l.ID == badID {
				t.Fatalf("the invalid row was delivered: %+v", l)
			}
		}
		conn := pgtest.Connect(t, dbURL)
		var id, errText string
		var row []byte
		err := conn.QueryRow(context.Background(), "SELECT message_id, error, row_data::text FROM "+dlq+" WHERE slot = $1 AND sink = ''", ob.Slot).
			Scan(&id, &errText, &row)
		if err != nil {
			t.Fatalf("reading the parked row: %v\n%s", err, p.Stderr.String())
		}
		if id != badID || !strings.Contains(errText, wantErr) {
			t.Fatalf("parked %s with error %q; want %s with %q", id, errText, badID, wantErr)
		}
		// The bytes are kept, base64, not replaced by U+FFFD.
		var data map[string]any
		if err := json.Unmarshal(row, &data); err != nil {
			t.Fatalf("row_data %s: %v", row, err)
		}
		if typ, _ := data["type"].(map[string]any); typ["base64"] != "YmFk/w==" || data["id"] != badID {
			t.Fatalf("row_data %s: want type {\"base64\": \"YmFk/w==\"} (bad\\xff) and the id", row)
		}
	})
}

// sqlASCIIDatabase creates a SQL_ASCII database on the test server, dropped
// when the test ends, and returns its URL.
func sqlASCIIDatabase(t *testing.T) string {
	t.Helper()
	base := pgtest.URL(t)
	name := pgtest.Name(t, "ascii")
	pgtest.Exec(t, base, fmt.Sprintf("CREATE DATABASE %s ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0", name))
	// Registered first, so it runs last: after the relay is gone and the
	// outboxes' slots are dropped (a database with a slot cannot be).
	t.Cleanup(func() { pgtest.Exec(t, base, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)") })
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}
