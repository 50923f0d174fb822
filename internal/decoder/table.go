package decoder

import (
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/walpost/walpost/internal/message"
)

// TableRow decodes an outbox row read from the table rather than from the
// stream (`cdc replay`, `cdc dead-letter resend`): content is the row as
// an adopt message carries it (Adopted as JSON: the mapped columns' type
// oids and text values by role), and the result is exactly the Message an
// INSERT of the same values would give (the adopt path's decoding), at
// lsn in a transaction committed at commitLSN and commitTime (zero when
// unknown). A row that cannot be mapped is an *Error. It leaves the
// decoder's stream state as it was: call it between stream events or on a
// decoder of its own.
func (d *Decoder) TableRow(content []byte, lsn, commitLSN pglogrepl.LSN, commitTime time.Time) (*message.Message, error) {
	saved := d.tx
	defer func() { d.tx = saved }()
	d.tx.open, d.tx.commitLSN, d.tx.commitTime = true, commitLSN, commitTime
	ev, err := d.adopted(&pglogrepl.LogicalDecodingMessage{LSN: lsn, Transactional: true, Prefix: "table row", Content: content})
	if err != nil {
		return nil, err
	}
	return ev.Msg, nil
}
