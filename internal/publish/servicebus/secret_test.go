package servicebus

import (
	"fmt"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/publish/sinktest"
)

// TestMalformedConnectionStringsNeverRepeatTheKey: connection strings
// mangled in the ways people mangle them are refused, through the
// registry as the relay prepares them, with an error that names the field
// and holds no piece of the key, even where the mangling puts the key
// into what looks like the Endpoint.
func TestMalformedConnectionStringsNeverRepeatTheKey(t *testing.T) {
	const key = "s3cretKEY+/a="
	for _, cs := range []string{
		"Endpoint=sb://ns.servicebus.windows.net/,SharedAccessKeyName=send,SharedAccessKey=" + key,      // commas
		"Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=send,SharedAccessKey=" + key,      // one comma
		"Endpoint=https://ns/,SharedAccessKeyName=send,SharedAccessKey=" + key,                          // commas, wrong scheme
		"Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=send;SharedAccessKey" + key,       // a missing '='
		"Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=send;SharedAccessKey =" + key,     // a space before '='
		"Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=send; SharedAccessKey=" + key,     // a space after ';'
		"Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=send;SharedAccessKey= " + key,     // a space after '='
		"Endpoint sb://ns.servicebus.windows.net/;SharedAccessKeyName=send;SharedAccessKey=" + key,      // no '=' after Endpoint
		"Endpoint=sb://ns/;SharedAccessKeyName=send;SharedAccessKey=" + key + ";SharedAccessKey=" + key, // twice
		"Endpoint=sb://ns/;SharedAccessKeyName=send;SharedAccessKey=" + key + ";UseDevelopmentEmulator=" + key,
		"Endpoint=SB://ns/;SharedAccessKeyName=send;SharedAccessKey=" + key + ";UseDevelopmentEmulator=true",
		"UseDevelopmentEmulator=true," + key + ";Endpoint=sb://ns/;SharedAccessKeyName=send;SharedAccessKey=" + key,
		key,
	} {
		doc := fmt.Sprintf("name: bus\nkind: servicebus\nconnection_string: %q\nqueue: q\n", cs)
		_, err := publish.Prepare(0, sinktest.SinkConfig(t, doc), zerolog.Nop())
		if err == nil {
			t.Errorf("%q: accepted", cs)
			continue
		}
		if !strings.Contains(err.Error(), "connection_string") {
			t.Errorf("%q: %v does not name connection_string", cs, err)
		}
		for _, piece := range []string{"s3cret", "cretKEY", "KEY+/a"} {
			if strings.Contains(err.Error(), piece) {
				t.Errorf("%q: %v repeats %q", cs, err, piece)
			}
		}
	}
}

// TestConnectionStringKeysAnyCase: the SDK matches keys without regard to
// case, and so does the check.
func TestConnectionStringKeysAnyCase(t *testing.T) {
	cs := "endpoint=sb://ns.servicebus.windows.net/;sharedaccesskeyname=send;sharedaccesskey=k3y;"
	if _, err := openConfig(t, fmt.Sprintf("connection_string: %q\nqueue: q\n", cs)); err != nil {
		t.Fatal(err)
	}
}
