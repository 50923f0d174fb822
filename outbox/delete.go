package outbox

import (
	"fmt"

	"github.com/jackc/pgx/v5"
)

// deleteInserted deletes the row just inserted with id, in the same
// transaction (Writer.DeleteAfterInsert). Logical replication decodes the
// INSERT from the WAL, whole, even though no one can see the row after
// the commit; walpost's publication publishes inserts only (publish =
// 'insert'), so the DELETE is not streamed, and the relay ignores deletes
// of any other publication. The application's role needs DELETE on the
// table.
func (w Writer) deleteInserted(id any, msg Message, exec func(stmt string, args []any) error) error {
	table, err := parseTable(w.table())
	if err != nil {
		return err
	}
	stmt := "DELETE FROM " + table.Sanitize() + " WHERE " + pgx.Identifier{w.Columns.withDefaults().ID}.Sanitize() + " = $1"
	if err := exec(stmt, []any{id}); err != nil {
		return fmt.Errorf("outbox: deleting message %s (type %q) from %s after inserting it (Writer.DeleteAfterInsert): %w", id, msg.Type, w.table(), err)
	}
	return nil
}
