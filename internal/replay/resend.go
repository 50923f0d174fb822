package replay

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/backoff"
	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/decoder"
	"github.com/walpost/walpost/internal/envsig"
	"github.com/walpost/walpost/internal/layout"
	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/pgconnect"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/store"
)

// Outcome is what Resend did with one parked row.
type Outcome struct {
	Parked store.Parked
	// Sinks are the sinks it was published to (or tried).
	Sinks []string
	// Err is why it was not delivered to all of them; nil: delivered, and
	// marked resent.
	Err error
}

// ErrOversized is in the Outcome.Err of a parked row or message that was
// larger than postgres.max_message_bytes: the relay never read it, so the
// dead-letter table holds only its position and small columns.
var ErrOversized = errors.New("replay: the parked row was larger than postgres.max_message_bytes and was not read")

// oversized is the error resend gives a row parked because it was too
// large to read: what to do instead.
func oversized(p *store.Parked, tableLess bool) error {
	if tableLess {
		return fmt.Errorf("%w: its content is in no table; have the producer emit it again (within the limit, or after raising it), then drop this row (cdc dead-letter drop %s)", ErrOversized, p.Name())
	}
	return fmt.Errorf("%w: its values are in the outbox table: raise postgres.max_message_bytes if the sinks take it, publish it with cdc replay --id %s, then drop this row (cdc dead-letter drop %s)", ErrOversized, p.ID, p.Name())
}

// ErrForged is in the Outcome.Err of a parked envelope of a table-less
// outbox with postgres.message_keys that no configured key signed (for
// its prefix, postgres.message_prefix): the relay parked it unpublished,
// and Resend does not publish it either (docs/security.md).
var ErrForged = errors.New("replay: the parked envelope is not signed with a key of postgres.message_keys")

// resendAttempts is how often Resend tries a message on a sink whose
// error is not permanent before it reports the failure.
const resendAttempts = 5

// Resend publishes parked rows again and marks each delivered one resent
// (store.MarkResent). A row of a held key (relay.on_invalid or
// on_refused: hold_key) releases its key: the key's parked messages are
// resent in stream order from its head (release), which must be the row
// or selected with it. A message a sink refused goes, as parked (same id,
// same bytes as the dead-letter table holds them), to that sink only; a
// row that could not be mapped is decoded again with the configuration's
// current mapping and the table's current column types (a bad envelope of
// a table-less outbox: as an envelope, which must first verify under
// postgres.message_keys when they are set, as in the stream: else its
// Outcome.Err wraps ErrForged), and goes to every sink whose route takes
// it. report gets each row's Outcome, in order, a row's failure
// (the table's column types unreadable included) in its Outcome.Err;
// Resend returns how many failed. It stops early only when ctx ends.
func Resend(ctx context.Context, cfg *config.Config, parked []store.Parked, log zerolog.Logger, report func(Outcome)) (failed int, err error) {
	conn, err := pgconnect.Connect(ctx, cfg.Postgres.StateURL())
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	r := NewResender(conn, cfg, log)
	defer r.Close()
	return r.Resend(ctx, parked, report)
}

// Resender resends parked rows (Resend, Release) on the connection to the
// state tables' server it is given, and on sinks it opens on first use.
// Not safe for concurrent use.
type Resender struct{ r *resender }

// NewResender returns a Resender on conn, which the caller closes after
// Close.
func NewResender(conn *pgx.Conn, cfg *config.Config, log zerolog.Logger) *Resender {
	ss, _ := newSinks(cfg, "", log)
	un := &unmapped{conn: conn, cfg: cfg, dec: decoder.New(cfg.Outbox()), keys: envsig.Keys(cfg.Postgres.MessageKeys)}
	return &Resender{&resender{conn: conn, ss: ss, un: un, tables: store.TablesOf(cfg)}}
}

// Borrow makes x publish through a running relay's sinks (lent:
// relay.Relay.Lent, publish.Lent) whenever it lends them, rather than
// open sinks of its own: beside the relay, a file sink's file is the
// relay's.
func (x *Resender) Borrow(lent func() []publish.Sink) { x.r.ss.lent = lent }

// Close closes the sinks the Resender opened.
func (x *Resender) Close() { x.r.ss.close() }

// Resend is the package's Resend on x's connection and sinks.
func (x *Resender) Resend(ctx context.Context, parked []store.Parked, report func(Outcome)) (failed int, err error) {
	ctx = publish.NoLockWait(ctx) // a running relay's file sink: fail at once (lockedError)
	r := x.r
	released := map[[2]string]bool{} // (sink, key) released by this call
	selected := map[string]bool{}    // sink/at of each row of parked
	for _, p := range parked {
		selected[p.Sink+"/"+p.At()] = true
	}
	inSelection := func(q *store.Parked) bool { return selected[q.Sink+"/"+q.At()] }
	for _, p := range parked {
		if err := ctx.Err(); err != nil {
			return failed, err
		}
		if p.Held() {
			if released[[2]string{p.Sink, p.HoldKey}] {
				continue // resent, and reported, with its key
			}
			n, err := r.release(ctx, p, false, inSelection, report)
			if err != nil {
				return failed + n, err
			}
			failed += n
			released[[2]string{p.Sink, p.HoldKey}] = true
			continue
		}
		out := r.resend(ctx, &p)
		if out.Err == nil {
			out.Err = store.MarkResent(ctx, r.conn, r.tables, &p)
		}
		if out.Err != nil {
			failed++
		}
		report(out)
		if errors.Is(out.Err, publish.ErrLocked) {
			return failed, lockedError(out.Err)
		}
	}
	return failed, nil
}

// lockedError is what a resend says when a file sink's file is held by
// another process, a running relay: nothing more is resent.
func lockedError(err error) error {
	return fmt.Errorf("%w; a file sink cannot be written beside the relay that holds its file: resend or release it from the console of that cdc run "+
		"(http.console: it publishes through the relay's own sinks), or stop that cdc run, run this command again, "+
		"then start the relay (the messages not resent stay parked, a held key stays held, and the relay goes on with its other keys meanwhile)", err)
}

// Release drops head, the parked message a key is held behind (relay.on_invalid
// or on_refused: hold_key), and resends the rest of its key's parked messages
// in order, which releases the key (release). report gets each resent
// message's Outcome; Release returns how many failed.
func (x *Resender) Release(ctx context.Context, head store.Parked, report func(Outcome)) (failed int, err error) {
	ctx = publish.NoLockWait(ctx) // a running relay's file sink: fail at once (lockedError)
	return x.r.release(ctx, head, true, nil, report)
}

// resender publishes parked rows again on sinks of its own.
type resender struct {
	conn   *pgx.Conn
	ss     *sinks
	un     *unmapped
	tables store.Tables
}

// resend publishes p again, without marking it: a message kept as the
// file sink writes it (refused, or held behind a key) as it is, to its
// sink or, held for every sink, to every sink whose route takes it; a
// row that could not be mapped decoded again.
func (r *resender) resend(ctx context.Context, p *store.Parked) Outcome {
	var msg *message.Message
	var to []int
	var err error
	if p.IsLine() {
		msg, err = MessageOfLine(p.RowData)
		switch i := r.ss.index(p.Sink); {
		case err != nil:
		case p.Sink == "":
			to = r.ss.routes(msg)
		case i < 0:
			err = fmt.Errorf("sink %s is not in the configuration any more", p.Sink)
		default:
			to = []int{i}
		}
	} else {
		msg, err = r.un.decode(ctx, p)
		if err == nil {
			to = r.ss.routes(msg)
		}
	}
	out := Outcome{Parked: *p}
	if err == nil {
		msg, err = unlessExpired(msg, r.ss.cfg.Relay.OnExpired, time.Now(), p)
	}
	if err == nil {
		out.Sinks, err = resendTo(ctx, r.ss, to, msg)
	}
	out.Err = err
	return out
}

// release resends a held key's parked messages in stream order, from its
// head, marking each resent under the key's lock (store.SettleHeld) as
// soon as it is delivered, until none is left: the key is then released,
// and the relay publishes its next message as usual. With drop, head is
// deleted instead of resent. p must be the key's head (its earliest
// parked message not resent), or the head must be selected too (the
// release then starts there); otherwise nothing is done and p's Outcome
// says which message to name. A message that fails stops the release:
// it is the key's head from then on, and the key stays held.
func (r *resender) release(ctx context.Context, p store.Parked, drop bool, selected func(*store.Parked) bool, report func(Outcome)) (failed int, err error) {
	rows, err := store.KeyRows(ctx, r.conn, r.tables, p.Sink, p.HoldKey)
	if err != nil {
		return 0, err
	}
	isHead := len(rows) > 0 && rows[0].LSN == p.LSN && rows[0].Seq == p.Seq
	if !isHead && len(rows) > 0 && selected != nil && selected(&rows[0]) {
		p, isHead = rows[0], true
	}
	if !isHead {
		head := "none (resent already)"
		if len(rows) > 0 {
			head = rows[0].Name() + " at " + rows[0].At()
		}
		report(Outcome{Parked: p, Err: fmt.Errorf("held behind the parked message of its key %q that came first (%s): resend or drop that one; "+
			"the key's other messages follow it in order", p.HoldKey, head)})
		return 1, nil
	}
	if drop {
		left, err := store.SettleHeld(ctx, r.conn, r.tables, &p, true)
		if err != nil || left == 0 {
			return 0, err
		}
		rows = rows[1:]
	}
	for {
		for i := range rows {
			if err := ctx.Err(); err != nil {
				return failed, err
			}
			out := r.resend(ctx, &rows[i])
			left := -1
			if out.Err == nil {
				left, out.Err = store.SettleHeld(ctx, r.conn, r.tables, &rows[i], false)
			}
			report(out)
			if errors.Is(out.Err, publish.ErrLocked) {
				return failed + 1, lockedError(out.Err)
			}
			if out.Err != nil {
				return failed + 1, nil // the key stays held behind it
			}
			if left == 0 {
				return failed, nil // released
			}
		}
		// Messages the relay held meanwhile: on with them.
		if rows, err = store.KeyRows(ctx, r.conn, r.tables, p.Sink, p.HoldKey); err != nil || len(rows) == 0 {
			return failed, err
		}
	}
}

// unmapped decodes parked rows that could not be mapped (sink "").
type unmapped struct {
	conn    *pgx.Conn
	cfg     *config.Config
	dec     *decoder.Decoder
	keys    [][]byte // postgres.message_keys; nil for none
	rows    *Rows    // the outbox table's column types, read at the first table row
	rowsErr error    // why they could not be read
}

// decode decodes p again: an envelope of a table-less outbox
// ({"envelope": ...}) with decoder.DecodeEnvelope, once it verified under
// the keys (verifyEnvelope), a table row with the current mapping and
// column types (decodeParked), both at p's LSNs. An error (a forged
// envelope, the column types cannot be read, the row still cannot be
// mapped) is p's alone.
func (u *unmapped) decode(ctx context.Context, p *store.Parked) (*message.Message, error) {
	tableLess := u.cfg.Postgres.TableLess()
	if strings.Contains(p.Error, decoder.OversizedText) {
		return nil, oversized(p, tableLess)
	}
	if env, ok := parkedEnvelope(p.RowData); ok && (tableLess || !mapped(u.cfg.Outbox().Columns, "envelope")) {
		content, err := u.verifyEnvelope(p, []byte(env))
		if err != nil {
			return nil, err
		}
		m, err := decoder.DecodeEnvelope(content)
		if err != nil {
			return nil, fmt.Errorf("still cannot be mapped: %w", err)
		}
		m.LSN, m.CommitLSN, m.Seq = p.LSN, p.CommitLSN, p.Seq
		return m, nil
	}
	if tableLess {
		return nil, errors.New(`row_data holds no envelope ({"envelope": "<content>"}, what a table-less outbox parks): nothing to decode`)
	}
	if u.rows == nil && u.rowsErr == nil {
		if u.rows, u.rowsErr = readTypes(ctx, u.conn, u.cfg.Outbox()); u.rowsErr != nil {
			u.rowsErr = fmt.Errorf("the outbox table %s: %w", u.cfg.Outbox(), u.rowsErr)
		}
	}
	if u.rowsErr != nil {
		return nil, u.rowsErr
	}
	return decodeParked(u.dec, u.rows, p)
}

// verifyEnvelope checks, when postgres.message_keys is set, that one of
// the keys signed env, a parked envelope's content exactly as it was
// emitted (the stream parks the message's bytes, signature included), for
// the outbox's prefix: the check the stream's decoder makes
// (envsig.Verify) before anything is published. It returns env without
// its signature, or env as it is without keys.
func (u *unmapped) verifyEnvelope(p *store.Parked, env []byte) ([]byte, error) {
	if u.keys == nil {
		if strings.Contains(p.Error, decoder.ForgedText) {
			// Parked as forged under keys since removed: nothing can
			// tell a producer's from a forgery now.
			return nil, fmt.Errorf("%w: it was parked as forged while postgres.message_keys was set, and no key is set now to check it with; "+
				"it stays parked. Drop it (cdc dead-letter drop %s), or set the key that signed it again and resend", ErrForged, p.Name())
		}
		return env, nil
	}
	body, err := envsig.Verify(u.keys, u.cfg.Postgres.MessagePrefix, env)
	if err != nil {
		return nil, fmt.Errorf("%w (%w): a role without a key wrote it, or it was altered, and the relay parked it unpublished; it stays parked. "+
			"Drop it (cdc dead-letter drop %s); if a producer holding a key wrote it, have the producer emit it again signed (outbox.SigningKey) "+
			"or add that key to postgres.message_keys", ErrForged, err, p.Name())
	}
	return body, nil
}

// parkedEnvelope returns the envelope of row_data {"envelope": ...}, the
// one field of a bad message of a table-less outbox (as text, or
// {"base64": ...} when it is not UTF-8).
func parkedEnvelope(rowData []byte) (string, bool) {
	var vals map[string]json.RawMessage
	if json.Unmarshal(rowData, &vals) != nil || len(vals) != 1 {
		return "", false
	}
	env, err := parkedText(vals, "envelope")
	if err != nil || env == nil {
		return "", false
	}
	return *env, true
}

// ErrExpired is in the Outcome.Err of a parked message whose expires_at
// has passed when it is resent, with relay.on_expired: drop: it is not
// published and stays parked.
var ErrExpired = errors.New("replay: the parked message has expired")

// unlessExpired applies relay.on_expired to msg, parked as p, when it has
// expired by now (docs/configuration.md, "Scheduled delivery and
// expiry"): with drop it is not resent (ErrExpired; it stays parked, for
// the operator to drop, or to resend under another policy); with send or
// dead_letter it goes without its expiry, as the stream sends it under
// send: resending a message parked by dead_letter is the decision that
// policy leaves to the operator. A message that has not expired goes with
// its deliver_at and expires_at, for the sink to schedule it and give it
// the time to live it has left.
func unlessExpired(msg *message.Message, policy config.ExpiredPolicy, now time.Time, p *store.Parked) (*message.Message, error) {
	if !msg.Expired(now) {
		return msg, nil
	}
	if policy != config.ExpiredSend && policy != config.ExpiredDeadLetter {
		return nil, fmt.Errorf("%w: its expires_at %s has passed, and relay.on_expired is %s: not resent, it stays parked; "+
			"drop it (cdc dead-letter drop %s), or resend it with relay.on_expired: send to publish it without its expiry",
			ErrExpired, msg.ExpiresAt.UTC().Format(time.RFC3339Nano), config.ExpiredDrop, p.Name())
	}
	c := *msg
	c.ExpiresAt = time.Time{}
	return &c, nil
}

// resendTo publishes msg to the sinks to, each in turn, and returns their
// names; it stops at the first that fails.
func resendTo(ctx context.Context, ss *sinks, to []int, msg *message.Message) ([]string, error) {
	var names []string
	for _, i := range to {
		names = append(names, ss.cfg.Sinks[i].Name)
		sink, err := ss.get(ctx, i)
		if err != nil {
			return names, err
		}
		if err := publishOne(ctx, sink, msg); err != nil {
			return names, fmt.Errorf("sink %s: %w", sink.Name(), err)
		}
	}
	return names, nil
}

// publishOne publishes m to sink, retrying an error that is not permanent
// a few times with backoff. A sink that cannot hold a message back
// refuses one whose deliver_at is still to come (publish.PublishOnTime),
// as in the stream: never sent early.
func publishOne(ctx context.Context, sink publish.Sink, m *message.Message) error {
	b := backoff.New(100*time.Millisecond, 2*time.Second)
	schedules := publish.Schedules(sink)
	var err error
	for range resendAttempts {
		if schedules {
			err = sink.Publish(ctx, []*message.Message{m})
		} else {
			err = publish.PublishOnTime(ctx, sink, []*message.Message{m}, time.Now())
		}
		if err == nil || publish.IsPermanent(err) {
			return err
		}
		if !backoff.Sleep(ctx, b.Next()) {
			return errors.Join(err, ctx.Err())
		}
	}
	return fmt.Errorf("%w (tried %d times)", err, resendAttempts)
}

// MessageOfLine reads a message back from its JSON line, the form the
// file sink writes and the dead-letter table keeps refused messages in
// (publish.AppendJSONLine): id, type, key, payload (or its base64 with
// payload_encoding), headers, lsn and commit_lsn, and the optional
// deliver_at and expires_at the dead-letter table adds (a record parked
// before them has neither: the message goes at once, without expiry).
// The payload keeps the bytes of the line's JSON value.
func MessageOfLine(line []byte) (*message.Message, error) {
	var l struct {
		ID, Type        string
		Key             *string
		Payload         json.RawMessage
		PayloadEncoding string `json:"payload_encoding"`
		Headers         map[string]string
		LSN             string
		CommitLSN       string    `json:"commit_lsn"`
		DeliverAt       time.Time `json:"deliver_at"`
		ExpiresAt       time.Time `json:"expires_at"`
	}
	if err := json.Unmarshal(line, &l); err != nil {
		return nil, fmt.Errorf("row_data is not a message line: %w", err)
	}
	if l.ID == "" || l.Type == "" || l.Payload == nil {
		return nil, errors.New("row_data is not a message line: id, type or payload missing")
	}
	m := &message.Message{ID: l.ID, Type: l.Type, Payload: l.Payload, PayloadJSON: true, DeliverAt: l.DeliverAt, ExpiresAt: l.ExpiresAt}
	if l.Key != nil {
		m.Key, m.HasKey = *l.Key, true
	}
	if len(l.Headers) > 0 {
		m.Headers = l.Headers
	}
	if l.PayloadEncoding == "base64" {
		var s string
		err := json.Unmarshal(l.Payload, &s)
		if err == nil {
			m.Payload, err = base64.StdEncoding.DecodeString(s)
		}
		if err != nil {
			return nil, fmt.Errorf("row_data: payload is not base64: %w", err)
		}
		m.PayloadJSON = false
	}
	m.LSN, _ = pglogrepl.ParseLSN(l.LSN)
	m.CommitLSN, _ = pglogrepl.ParseLSN(l.CommitLSN)
	return m, nil
}

// decodeParked decodes a row that could not be mapped (row_data: its
// mapped columns by name, decoder.RowValues) with the current mapping and
// column types, at its LSNs. A row parked as a malformed adopt message
// ({"adopt_message": ...}) is decoded as that message.
func decodeParked(dec *decoder.Decoder, rows *Rows, p *store.Parked) (*message.Message, error) {
	var vals map[string]json.RawMessage
	if err := json.Unmarshal(p.RowData, &vals); err != nil {
		return nil, fmt.Errorf("row_data is not an object of column values: %w", err)
	}
	text := func(name string) (*string, error) { return parkedText(vals, name) }
	var content []byte
	if adopt, _ := text("adopt_message"); adopt != nil && len(vals) == 1 && !mapped(rows.Table.Columns, "adopt_message") {
		content = []byte(*adopt)
	} else {
		a := decoder.Adopted{V: 1, OIDs: make([]uint32, layout.NumRoles), Values: make([]*string, layout.NumRoles)}
		for role, oid := range rows.OIDs {
			if oid == 0 {
				continue
			}
			a.OIDs[role] = uint32(oid)
			v, err := text(rows.Table.Columns[role])
			if err != nil {
				return nil, err
			}
			a.Values[role] = v
		}
		content, _ = json.Marshal(a)
	}
	m, err := dec.TableRow(content, p.LSN, p.CommitLSN, time.Time{})
	if err != nil {
		return nil, fmt.Errorf("still cannot be mapped: %w", err)
	}
	return m, nil
}

// parkedText returns the value of row_data's field name: a string, the
// bytes of {"base64": ...}, or the text of any other JSON value (a json or
// jsonb column's value fixed by an operator as JSON rather than as a JSON
// string); nil when absent.
func parkedText(vals map[string]json.RawMessage, name string) (*string, error) {
	raw, ok := vals[name]
	if !ok {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return &s, nil
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) == nil && len(obj) == 1 && obj["base64"] != nil {
		var b struct{ Base64 []byte }
		if err := json.Unmarshal(raw, &b); err != nil {
			return nil, fmt.Errorf("row_data: %q: {\"base64\": ...} holds no base64: %w", name, err)
		}
		s = string(b.Base64)
		return &s, nil
	}
	s = string(raw)
	return &s, nil
}

func mapped(c layout.Columns, name string) bool {
	for _, n := range c {
		if n == name {
			return true
		}
	}
	return false
}
