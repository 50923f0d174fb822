package outboxdb

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/internal/config"
)

// Who may write a table-less outbox's messages (docs/security.md,
// "Table-less outbox: who may write a message"). PostgreSQL grants
// EXECUTE on pg_logical_emit_message to PUBLIC: every role that can
// connect may emit a message with the outbox's prefix. postgres.message_roles
// has cdc init take that from PUBLIC; postgres.message_keys has the relay
// publish only signed envelopes (cdc init's side: admin, restrictEmit).

// PublicCanEmit reports whether PUBLIC may execute a pg_logical_emit_message:
// any role that can connect may then write a table-less outbox's messages.
func PublicCanEmit(ctx context.Context, conn *pgx.Conn) (bool, error) {
	var open bool
	err := conn.QueryRow(ctx, `SELECT coalesce(bool_or(p.proacl IS NULL OR EXISTS (
			SELECT 1 FROM aclexplode(p.proacl) a WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE')), false)
		FROM pg_proc p WHERE p.proname = 'pg_logical_emit_message' AND p.pronamespace = 'pg_catalog'::regnamespace`).Scan(&open)
	if err != nil {
		return false, fmt.Errorf("reading who may execute pg_logical_emit_message: %w", err)
	}
	return open, nil
}

// EmitRisk is the warning for a table-less outbox that any role may write,
// "" when there is none: message_keys set, or PUBLIC without EXECUTE. cdc
// run logs it at start, cdc status prints it.
func EmitRisk(ctx context.Context, conn *pgx.Conn, cfg *config.Config) (string, error) {
	if !cfg.Postgres.TableLess() || len(cfg.Postgres.MessageKeys) > 0 {
		return "", nil
	}
	open, err := PublicCanEmit(ctx, conn)
	if err != nil || !open {
		return "", err
	}
	return "PUBLIC may execute pg_logical_emit_message: any role that can connect to the database can publish a message with prefix " +
		fmt.Sprintf("%q", cfg.Postgres.MessagePrefix) + " through this relay; set postgres.message_roles and run cdc init as a superuser, " +
		"or set postgres.message_keys and sign with outbox.SigningKey (docs/security.md)", nil
}
