package admin

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// cdc init's side of who may write a table-less outbox's messages
// (docs/security.md, "Table-less outbox: who may write a message";
// outboxdb.EmitRisk is the warning when anyone may).

// emitFunctions selects every pg_logical_emit_message of the server (two
// in PostgreSQL 15, one more with flush in 17).
const emitFunctions = `SELECT p.oid::regprocedure::text FROM pg_proc p
	WHERE p.proname = 'pg_logical_emit_message' AND p.pronamespace = 'pg_catalog'::regnamespace ORDER BY 1`

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
