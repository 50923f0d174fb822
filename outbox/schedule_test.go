package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walpost/walpost/internal/decoder"
)

// TestDeliverAtAndExpiresAtTravel: in an envelope they are the fields
// deliver_at and expires_at the relay reads back; to a table they need
// Columns naming their columns (NULL when zero), and without them a
// message that has one is refused before anything is written.
func TestDeliverAtAndExpiresAtTravel(t *testing.T) {
	at := time.Date(2026, 12, 6, 7, 0, 3, 5e8, time.FixedZone("CET", 3600))
	msg := Message{ID: testID, Type: "t", Payload: json.RawMessage(`{}`), DeliverAt: at, ExpiresAt: at.Add(time.Hour)}
	env, err := Envelope(context.Background(), msg)
	if err != nil {
		t.Fatal(err)
	}
	m, err := decoder.DecodeEnvelope(env)
	if err != nil || !m.DeliverAt.Equal(at) || !m.ExpiresAt.Equal(at.Add(time.Hour)) || !strings.Contains(string(env), `"deliver_at":"2026-12-06T06:00:03.5Z"`) {
		t.Fatalf("%s: %+v, %v", env, m, err)
	}

	var r recorderSched
	if err := (Writer{}).Enqueue(context.Background(), &r, msg); !errors.Is(err, ErrNoTimeColumn) || len(r.stmts) != 0 {
		t.Fatalf("no columns: %v, wrote %q", err, r.stmts)
	}
	w := Writer{Columns: Columns{DeliverAt: "deliver_at", ExpiresAt: "expires_at"}}
	if err := w.Enqueue(context.Background(), &r, msg); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(r.stmts[0], `"deliver_at", "expires_at") VALUES`) || r.args[0][len(r.args[0])-2] != at {
		t.Fatalf("%s %v", r.stmts[0], r.args[0])
	}
	msg.DeliverAt, msg.ExpiresAt = time.Time{}, time.Time{}
	if err := w.Enqueue(context.Background(), &r, msg); err != nil || r.args[1][len(r.args[1])-1] != nil {
		t.Fatalf("zero times are NULL: %v %v", err, r.args[1])
	}
}

// recorderSched records the statements Enqueue runs.
type recorderSched struct {
	stmts []string
	args  [][]any
}

func (r *recorderSched) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	r.stmts = append(r.stmts, sql)
	r.args = append(r.args, args)
	return pgconn.NewCommandTag("INSERT 0 1"), nil
}
