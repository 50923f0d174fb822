package relay

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walpost/walpost/internal/config"
)

// Who may write a table-less outbox's messages (docs/security.md,
// "Table-less outbox: who may write a message"). PostgreSQL grants
// EXECUTE on pg_logical_emit_message to PUBLIC: every role that can
// connect may emit a message with the outbox's prefix. postgres.message_roles
// has cdc init take that from PUBLIC; postgres.message_keys has the relay
// publish only signed envelopes.

// emitFunctions selects every pg_logical_emit_message of the server (two
// in PostgreSQL 15, one more with flush in 17).
const emitFunctions = `SELECT p.oid::regprocedure::text FROM pg_proc p
	WHERE p.proname = 'pg_logical_emit_message' AND p.pronamespace = 'pg_catalog'::regnamespace ORDER BY 1`

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

// emitRisk is the warning for a table-less outbox that any role may write,
// "" when there is none: message_keys set, or PUBLIC without EXECUTE.
func emitRisk(ctx context.Context, conn *pgx.Conn, cfg *config.Config) (string, error) {
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

// EmitRisk is emitRisk for `cdc status`.
func EmitRisk(ctx context.Context, conn *pgx.Conn, cfg *config.Config) (string, error) {
	return emitRisk(ctx, conn, cfg)
}

// restrictEmit revokes EXECUTE on every pg_logical_emit_message from
// PUBLIC and grants it to roles, in one transaction. It needs a
// superuser (the functions belong to the bootstrap superuser).
func restrictEmit(ctx context.Context, conn *pgx.Conn, roles []string) error {
	rows, err := conn.Query(ctx, emitFunctions)
	if err != nil {
		return err
	}
	fns, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	quoted := make([]string, len(roles))
	for i, r := range roles {
		quoted[i] = pgx.Identifier{r}.Sanitize()
	}
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		for _, fn := range fns {
			// fn is regprocedure's own text: pg_logical_emit_message(boolean,text,bytea).
			if _, err := tx.Exec(ctx, "REVOKE EXECUTE ON FUNCTION "+fn+" FROM PUBLIC"); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, "GRANT EXECUTE ON FUNCTION "+fn+" TO "+strings.Join(quoted, ", ")); err != nil {
				return err
			}
		}
		return nil
	})
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42501" {
		return fmt.Errorf("postgres.message_roles: taking EXECUTE on pg_logical_emit_message from PUBLIC needs a superuser (the function belongs to the bootstrap superuser): "+
			"run cdc init as one, or run as one: REVOKE EXECUTE ON FUNCTION pg_logical_emit_message(boolean,text,text), pg_logical_emit_message(boolean,text,bytea) FROM PUBLIC; "+
			"GRANT EXECUTE ON FUNCTION … TO %s: %w", strings.Join(quoted, ", "), err)
	}
	if errors.As(err, &pe) && pe.Code == "42704" {
		return fmt.Errorf("postgres.message_roles: %s (create the role first): %w", pe.Message, err)
	}
	if err != nil {
		return fmt.Errorf("postgres.message_roles: %w", err)
	}
	return nil
}
