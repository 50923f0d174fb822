package coverage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/internal/replication"
)

// Look is what one look at the catalog found: whether, and by what, the
// publication publishes the outbox's inserts.
type Look struct {
	Seen    string // what covers the outbox; "" when nothing does
	Covered bool
	Why     string // why not covered
	At      time.Time
	LSN     pglogrepl.LSN // the WAL insert position, read after At
	Others  []string      // other tables the publication publishes
}

// Read reads, in one statement, whether the publication publishes
// the outbox's inserts and what makes it do so: the publication's OID,
// FOR ALL TABLES, its pg_publication_rel row for the table (and, from
// PostgreSQL 15, its pg_publication_namespace row for the schema), the
// table's OID. Then the server's clock, then the WAL insert position.
func Read(ctx context.Context, conn *pgx.Conn, t replication.Target) (Look, error) {
	var c Look
	var pubOID, relOID, prOID, nsOID *int64
	var all, insert *bool
	var covered bool
	err := conn.QueryRow(ctx, `
WITH p AS (SELECT oid, pubname, puballtables, pubinsert FROM pg_publication WHERE pubname = $1),
     r AS (SELECT c.oid, c.relnamespace FROM pg_class c WHERE c.oid = to_regclass($2))
SELECT (SELECT oid::int8 FROM p), (SELECT puballtables FROM p), (SELECT pubinsert FROM p), (SELECT oid::int8 FROM r),
       (SELECT pr.oid::int8 FROM pg_publication_rel pr, p, r WHERE pr.prpubid = p.oid AND pr.prrelid = r.oid),
       EXISTS (SELECT 1 FROM pg_publication_tables pt WHERE pt.pubname = $1 AND pt.schemaname = $3 AND pt.tablename = $4),
       clock_timestamp()`, t.Publication, t.QualifiedTable(), t.Outbox.Schema, t.Outbox.Name).
		Scan(&pubOID, &all, &insert, &relOID, &prOID, &covered, &c.At)
	if err != nil {
		return c, fmt.Errorf("reading what publishes the outbox: %w", err)
	}
	var major int
	fmt.Sscan(conn.PgConn().ParameterStatus("server_version"), &major)
	if pubOID != nil && relOID != nil && major >= 15 {
		// FOR TABLES IN SCHEMA (PostgreSQL 15): the publication's row for
		// the table's schema.
		err := conn.QueryRow(ctx, "SELECT pn.oid::int8 FROM pg_publication_namespace pn, pg_class c WHERE pn.pnpubid = $1::int8::oid AND c.oid = $2::int8::oid AND pn.pnnspid = c.relnamespace",
			*pubOID, *relOID).Scan(&nsOID)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return c, fmt.Errorf("reading the publication's schemas: %w", err)
		}
	}
	var lsn string
	if err := conn.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&lsn); err != nil {
		return c, fmt.Errorf("reading the WAL insert position: %w", err)
	}
	c.LSN, _ = pglogrepl.ParseLSN(lsn)
	switch {
	case pubOID == nil:
		c.Why = fmt.Sprintf("publication %q does not exist", t.Publication)
	case relOID == nil:
		c.Why = fmt.Sprintf("table %s does not exist (renamed or dropped)", t.Outbox)
	case !covered:
		c.Why = fmt.Sprintf("publication %q does not publish table %s", t.Publication, t.Outbox)
	case !*insert:
		c.Why = fmt.Sprintf("publication %q does not publish inserts", t.Publication)
	default:
		c.Covered = true
		num := func(p *int64) int64 {
			if p == nil {
				return 0
			}
			return *p
		}
		c.Seen = fmt.Sprintf("publication %d all_tables %t rel %d schema %d table %d", *pubOID, *all, num(prOID), num(nsOID), *relOID)
	}
	if pubOID != nil {
		rows, err := conn.Query(ctx, "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = $1 AND (schemaname, tablename) <> ($2, $3) ORDER BY 1, 2 LIMIT 5",
			t.Publication, t.Outbox.Schema, t.Outbox.Name)
		if err != nil {
			return c, fmt.Errorf("reading the publication's tables: %w", err)
		}
		for rows.Next() {
			var s, n string
			if err := rows.Scan(&s, &n); err != nil {
				rows.Close()
				return c, err
			}
			c.Others = append(c.Others, s+"."+n)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return c, err
		}
	}
	return c, nil
}
