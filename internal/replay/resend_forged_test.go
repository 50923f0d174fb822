package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/jackc/pglogrepl"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/decoder"
	"github.com/walpost/walpost/internal/envsig"
	"github.com/walpost/walpost/internal/store"
)

// TestResendVerifiesAParkedEnvelopeAsTheStreamDoes: with
// postgres.message_keys, a parked envelope of a table-less outbox (its
// row_data as the stream parks it: decoder.RowValues {"envelope": the
// emitted bytes}) is decoded for resending only when a configured key
// signed it for the outbox's prefix; unsigned, signed with another key or
// for another prefix, or altered, it is refused with ErrForged and the
// signature's error, naming how to drop it. What encoding/json escapes in
// row_data (<, &, U+2028, a backslash) comes back as emitted: the
// signature still verifies. Without keys an unsigned envelope decodes, as the stream
// publishes it.
func TestResendVerifiesAParkedEnvelopeAsTheStreamDoes(t *testing.T) {
	key := []byte("0123456789abcdef0123")
	payload := `{"note":"<a> & ` + "\u2028" + ` é \u00e9"}` // U+2028 itself, and a \u escape
	body := []byte(`{"v":1,"id":"0190f5c2-6a8e-7cc0-9a4e-0e7d6c1b2a31","type":"order.created","key":"k","payload":` + payload + `}`)
	signed := envsig.Sign(key, "walpost", body)
	parked := func(content []byte) *store.Parked {
		row, err := json.Marshal(decoder.RowValues{"envelope": string(content)})
		if err != nil {
			t.Fatal(err)
		}
		return &store.Parked{ID: "0190f5c2-6a8e-7cc0-9a4e-0e7d6c1b2a31", LSN: pglogrepl.LSN(0x16B3748), CommitLSN: pglogrepl.LSN(0x16B37A0), RowData: row}
	}
	un := func(keys ...string) *unmapped {
		cfg := &config.Config{Postgres: config.Postgres{Source: config.SourceMessages, MessagePrefix: "walpost", MessageKeys: keys}}
		return &unmapped{cfg: cfg, keys: envsig.Keys(keys)}
	}
	ctx := context.Background()

	m, err := un("another key of 20 by", string(key)).decode(ctx, parked(signed))
	if err != nil || m.ID != "0190f5c2-6a8e-7cc0-9a4e-0e7d6c1b2a31" || m.Type != "order.created" || m.Key != "k" ||
		!bytes.Equal(m.Payload, []byte(payload)) || m.LSN != 0x16B3748 || m.CommitLSN != 0x16B37A0 {
		t.Fatalf("signed envelope: %+v, %v; want it decoded at its parked LSNs", m, err)
	}
	for _, c := range []struct {
		name    string
		content []byte
		want    error
	}{
		{"unsigned", body, envsig.ErrUnsigned},
		{"another key", envsig.Sign([]byte("not the relay's key!"), "walpost", body), envsig.ErrBad},
		{"another prefix", envsig.Sign(key, "walpost.other", body), envsig.ErrBad},
		{"altered", bytes.Replace(signed, []byte("order.created"), []byte("order.refunded"), 1), envsig.ErrBad},
	} {
		m, err := un(string(key)).decode(ctx, parked(c.content))
		if m != nil || !errors.Is(err, ErrForged) || !errors.Is(err, c.want) ||
			!bytes.Contains([]byte(err.Error()), []byte("cdc dead-letter drop 0190f5c2-6a8e-7cc0-9a4e-0e7d6c1b2a31")) {
			t.Errorf("%s: %+v, %v; want ErrForged, %v and how to drop it", c.name, m, err, c.want)
		}
	}
	if m, err := un().decode(ctx, parked(body)); err != nil || m.Type != "order.created" {
		t.Fatalf("unsigned envelope without message_keys: %+v, %v; want it decoded", m, err)
	}
	// Parked as forged while keys were set: with the keys removed it is
	// still refused, not published unchecked.
	forged := parked(body)
	forged.Error = "logical message with prefix \"walpost\": envsig: unsigned (" + decoder.ForgedText + "; outbox.SigningKey)"
	if m, err := un().decode(ctx, forged); m != nil || !errors.Is(err, ErrForged) {
		t.Fatalf("forged envelope after the keys were removed: %+v, %v; want ErrForged", m, err)
	}
}
