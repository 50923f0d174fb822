package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walpost/walpost/internal/decoder"
	"github.com/walpost/walpost/internal/pgconnect"
	"github.com/walpost/walpost/internal/pipeline"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/replication"
)

// TestErrorPolicyDecidesEveryKind: every sentinel and kind of error a
// cycle ends with, wrapped as the cycle wraps it, takes its row of the
// policy: stop, restart after the backoff, or restart at once; the hints
// that need no server say what to do.
func TestErrorPolicyDecidesEveryKind(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("cycle: %w", err) }
	refused := &pgconn.PgError{Code: "28P01", Message: "password authentication failed"}
	for _, c := range []struct {
		name string
		err  error
		then onError
		kind string
	}{
		{"unreadable url", wrap(pgconnect.ErrURL), stop, "postgres.url unreadable"},
		{"unreadable url at connect", transient{pgconnect.ErrURL}, stop, "postgres.url unreadable"},
		{"refused at connect", transient{refused}, stop, "role or database refused"},
		{"standby without primary", transient{replication.ErrStandbyNoPrimary}, stop, "topology refused"},
		{"not a standby", wrap(replication.ErrNotStandby), stop, "topology refused"},
		{"same server", wrap(replication.ErrSameServer), stop, "topology refused"},
		{"not primary", wrap(replication.ErrNotPrimary), stop, "topology refused"},
		{"standby version", wrap(replication.ErrStandbyVersion), stop, "topology refused"},
		{"wal_level", wrap(replication.ErrWALLevel), stop, "topology refused"},
		{"slot lost", wrap(replication.ErrSlotLost), restartNow, "slot lost"},
		{"protocol", wrap(decoder.ErrProtocol), restart, "protocol"},
		{"standby promoted", ErrStandbyPromoted, restart, "standby promoted"},
		{"stopped at a row", wrap(&pipeline.StopAtRow{Err: &decoder.Error{Err: errors.New("type is empty")}}), stop, "stopped at a row"},
		{"publication gone", wrap(&pgconn.PgError{Code: "42704", Message: `publication "p" does not exist`}), stop, "publication gone"},
		{"slot missing at START_REPLICATION", wrap(fmt.Errorf("%w: %w", replication.ErrSlotMissing, &pgconn.PgError{Code: "42704"})), stop, "failed"},
		{"slot invalidated", wrap(replication.ErrSlotInvalidated), stop, "failed"},
		{"drain cut", wrap(ErrDrainCut), stop, "drain cut"},
		{"server unreachable", transient{errors.New("dial tcp: connection refused")}, restart, "transient"},
		{"sink waited for its lock", transient{context.DeadlineExceeded}, restart, "transient"},
		{"a check failed", wrap(replication.ErrPublicationMissing), stop, "failed"},
		{"server restarted under a park", wrap(fmt.Errorf("dead-letter: holding message 0/1: %w", pgconn.ErrConnClosed)), restart, "connection lost"},
		{"server stopping under the marks", wrap(fmt.Errorf("columns.sent_at: %w", &pgconn.PgError{Code: "57P01"})), restart, "connection lost"},
		{"server starting under a check", wrap(&pgconn.PgError{Code: "57P03"}), restart, "connection lost"},
		{"connection reset", wrap(&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}), restart, "connection lost"},
		{"eof", wrap(io.ErrUnexpectedEOF), restart, "connection lost"},
		{"a sink's permanent network error", wrap(publish.Permanent(&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED})), stop, "failed"},
		{"refused role at a later connect", wrap(refused), stop, "role or database refused"},
		{"anything else", errors.New("sink out: 400"), stop, "failed"},
	} {
		if rule := ruleFor(c.err); rule.then != c.then || rule.kind != c.kind {
			t.Errorf("%s: %s (%s), want %s (%s)", c.name, rule.kind, rule.then, c.kind, c.then)
		}
	}
	r := &Relay{}
	if err := ruleFor(transient{refused}).hint(r, cycleEnd{}, transient{refused}); !strings.Contains(err.Error(), "fix the user, password or database") {
		t.Errorf("refused: %v, want the hint", err)
	}
	if err := ruleFor(decoder.ErrProtocol).hint(r, cycleEnd{confirmed: 0x16B3748}, decoder.ErrProtocol); !strings.Contains(err.Error(), "reconnecting from the confirmed position 0/16B3748") {
		t.Errorf("protocol: %v, want the position it reconnects from", err)
	}
	if then, err := r.onCycleEnd(cycleEnd{}, false); then != stop || err != nil {
		t.Errorf("a cycle that ended without error: %s, %v; want a clean stop", then, err)
	}
}
