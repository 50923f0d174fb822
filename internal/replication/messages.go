package replication

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ErrMessagesVersion is wrapped by CheckServer's error for a table-less
// outbox (Target.TableLess) on a server before PostgreSQL 14, whose
// pgoutput cannot send logical messages.
var ErrMessagesVersion = errors.New("replication: postgres.source: messages needs PostgreSQL 14 or later")

// messagesVersion is the first server_version_num whose pgoutput sends
// logical messages (the messages option).
const messagesVersion = 140000

// SendsMessages reports whether the server's pgoutput sends logical
// messages (PostgreSQL 14 on), which a table-less outbox, adopted rows
// (cdc init --adopt, cdc recover) and cdc skip's peek of them need, and
// the server_version_num it judged by.
func SendsMessages(ctx context.Context, conn *pgx.Conn) (bool, int, error) {
	num, err := ServerVersion(ctx, conn)
	return num >= messagesVersion, num, err
}

// checkMessagesServer is CheckServer's check of the table for a
// table-less outbox: there is no table; the server's pgoutput must send
// logical messages (the messages option, PostgreSQL 14).
func checkMessagesServer(ctx context.Context, conn *pgx.Conn) error {
	ok, num, err := SendsMessages(ctx, conn)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w (pgoutput sends logical messages from 14 on); this server is %d.%d: upgrade it, or use postgres.source: table",
			ErrMessagesVersion, num/10000, num%10000)
	}
	return nil
}
