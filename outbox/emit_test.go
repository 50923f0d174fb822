package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/walpost/walpost/internal/decoder"
	"github.com/walpost/walpost/internal/message"
)

const testID = "0190f5c2-6a8e-7cc0-9a4e-0e7d6c1b2a31"

// TestEnvelopeIsWhatTheRelayDecodes: what Envelope writes, the relay's
// decoder reads back as the same message: JSON payloads byte for byte
// (no HTML escaping, spacing kept), bytes through payload_base64, the
// context's traceparent in the headers, an empty key as none.
func TestEnvelopeIsWhatTheRelayDecodes(t *testing.T) {
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ctx := ContextWithTraceparent(context.Background(), tp)
	for _, c := range []struct {
		msg  Message
		opts []EmitOption
		want message.Message
	}{
		{Message{ID: testID, Type: "a<b>", Key: "k&", Payload: json.RawMessage(`{ "x" : "<&>" }`), Headers: map[string]string{"tenant": "é"}}, nil,
			message.Message{ID: testID, Type: "a<b>", Key: "k&", HasKey: true, Payload: []byte(`{ "x" : "<&>" }`), PayloadJSON: true,
				Headers: map[string]string{"tenant": "é", "traceparent": tp}}},
		{Message{ID: testID, Type: "t", Payload: map[string]int{"n": 1}}, nil,
			message.Message{ID: testID, Type: "t", Payload: []byte(`{"n":1}`), PayloadJSON: true, Headers: map[string]string{"traceparent": tp}}},
		{Message{ID: testID, Type: "t", Payload: []byte{0, 0xff, 'x'}}, []EmitOption{BinaryPayload()},
			message.Message{ID: testID, Type: "t", Payload: []byte{0, 0xff, 'x'}, Headers: map[string]string{"traceparent": tp}}},
	} {
		env, err := Envelope(ctx, c.msg, c.opts...)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decoder.DecodeEnvelope(env)
		if err != nil || !reflect.DeepEqual(*got, c.want) {
			t.Errorf("%s:\ngot  %+v (%v)\nwant %+v", env, got, err, c.want)
		}
	}
	env, err := Envelope(context.Background(), Message{Type: "t", Payload: 1})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := decoder.DecodeEnvelope(env); err != nil || len(m.ID) != 36 || m.Headers != nil {
		t.Fatalf("a new id: %s %+v %v", env, m, err)
	}
}

// TestEmitRefusesWhatTheRelayWouldStopAt: an id that is not a UUID, no
// type, a payload that is not JSON or not UTF-8, text that is not UTF-8,
// a binary payload that is not bytes, an empty prefix: errors before
// anything is written.
func TestEmitRefusesWhatTheRelayWouldStopAt(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		msg  Message
		opts []EmitOption
		want error
	}{
		{Message{ID: "order-7", Type: "t", Payload: 1}, nil, ErrInvalidID},
		{Message{ID: "{" + testID + "}", Type: "t", Payload: 1}, nil, ErrInvalidID},
		{Message{Payload: 1}, nil, ErrNoType},
		{Message{Type: "t"}, nil, ErrNoPayload},
		{Message{Type: "t", Payload: []byte("not json")}, nil, ErrInvalidPayload},
		{Message{Type: "t", Payload: []byte("\"\xff\"")}, nil, ErrInvalidPayload},
		{Message{Type: "t\xff", Payload: 1}, nil, ErrInvalidText},
		{Message{Type: "t", Key: "\xff", Payload: 1}, nil, ErrInvalidText},
		{Message{Type: "t", Headers: map[string]string{"a": "\xff"}, Payload: 1}, nil, ErrInvalidText},
		{Message{Type: "t", Headers: map[string]string{"traceparent": "x"}, Payload: 1}, nil, ErrInvalidTraceparent},
		{Message{Type: "t", Payload: "text"}, []EmitOption{BinaryPayload()}, ErrInvalidPayload},
		{Message{Type: "t", Payload: 1}, []EmitOption{Prefix("")}, ErrInvalidPrefix},
		{Message{Type: "t", Payload: 1}, []EmitOption{Prefix("a\x00b")}, ErrInvalidPrefix},
	} {
		ran := false
		err := emit(ctx, c.msg, c.opts, func(string, []any) error { ran = true; return nil })
		if !errors.Is(err, c.want) || ran {
			t.Errorf("%+v: %v (ran %v), want %v", c.msg, err, ran, c.want)
		}
	}
}

// TestEmitPassesThePrefixAndTheEnvelopeAsBytes: the statement binds the
// prefix (DefaultPrefix unless told) and the envelope (bytea).
func TestEmitPassesThePrefixAndTheEnvelopeAsBytes(t *testing.T) {
	for opts, want := range map[*[]EmitOption]string{{}: DefaultPrefix, {Prefix("app.events")}: "app.events"} {
		var args []any
		err := emit(context.Background(), Message{ID: testID, Type: "t", Payload: 1}, *opts, func(stmt string, a []any) error {
			if stmt != emitStmt {
				t.Errorf("statement %q", stmt)
			}
			args = a
			return nil
		})
		if err != nil || len(args) != 2 || args[0] != want || string(args[1].([]byte)) != `{"v":1,"id":"`+testID+`","type":"t","payload":1}` {
			t.Fatalf("%v: args %q", err, args)
		}
	}
}
