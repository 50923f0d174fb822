package rabbitmq

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/publish/sinktest"
)

// TestMalformedURLsNeverRepeatThePassword: URLs mangled in the ways people
// mangle them are refused, through the registry as the relay prepares
// them, with an error that names the url field and holds no piece of the
// password (url.Parse, under the client's ParseURI, quotes the whole URL).
func TestMalformedURLsNeverRepeatThePassword(t *testing.T) {
	const pw = "s3cret%zzKEY"
	for _, u := range []string{
		"amqp://walpost:" + pw + "@rabbit:5672/",        // a bad percent-escape
		"amqp://walpost:s3cret KEY@rabbit:5672/",        // a space
		"amqp://walpost:s3cret/KEY@rabbit:5672/",        // an unescaped '/'
		"amqp://walpost:s3cretKEY@rabbit:notaport/",     // a bad port
		"amqps://walpost:s3cret\x7fKEY@rabbit/",         // a control character
		"rabbitmq://walpost:s3cretKEY@rabbit:5672/",     // the wrong scheme
		"amqp//walpost:s3cretKEY@rabbit:5672/",          // no ':'
		"amqp://walpost:s3cretKEY@[::1/",                // an open bracket
		"amqp://walpost:s3cretKEY@rabbit:5672/%zzvhost", // a bad vhost escape
	} {
		doc := fmt.Sprintf("name: bus\nkind: rabbitmq\nurl: %q\nexchange: x\n", u)
		_, err := publish.Prepare(0, sinktest.SinkConfig(t, doc), zerolog.Nop())
		if err == nil {
			t.Errorf("%q: accepted", strings.ReplaceAll(u, "s3cret", "xxx"))
			continue
		}
		if !strings.Contains(err.Error(), "url") {
			t.Errorf("%v does not name url", err)
		}
		for _, piece := range []string{"s3cret", "cretKEY", "zzKEY", "cret KEY", "cret/KEY"} {
			if strings.Contains(err.Error(), piece) {
				t.Errorf("%q: error %v repeats %q", strings.ReplaceAll(u, "s3cret", "xxx"), strings.ReplaceAll(err.Error(), "s3cret", "xxx"), piece)
			}
		}
	}
}

// TestConnectionErrorsAndLogsNeverHoldThePassword: configuring the sink
// and failing to connect (nothing listens on port 1) leave the password
// out of the error and every log line.
func TestConnectionErrorsAndLogsNeverHoldThePassword(t *testing.T) {
	var logs bytes.Buffer
	doc := "name: bus\nkind: rabbitmq\nurl: \"amqp://walpost:s3cretKEY%40x@127.0.0.1:1/prod\"\nexchange: x\n"
	open, err := publish.Prepare(0, sinktest.SinkConfig(t, doc), zerolog.New(&logs).Level(zerolog.DebugLevel))
	if err != nil {
		t.Fatal(err)
	}
	s, err := open(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.Publish(t.Context(), sinktest.NewGen(1).Interleave(1, "k"))
	if err == nil || publish.IsPermanent(err) {
		t.Fatalf("Publish with nothing listening = %v, want a transient error", err)
	}
	for _, text := range []string{err.Error(), logs.String()} {
		for _, piece := range []string{"s3cret", "KEY%40x", "KEY@x"} {
			if strings.Contains(text, piece) {
				t.Errorf("%q holds %q", text, piece)
			}
		}
	}
	if !strings.Contains(logs.String(), "127.0.0.1:1") {
		t.Errorf("the log does not show the server: %s", logs.String())
	}
}
