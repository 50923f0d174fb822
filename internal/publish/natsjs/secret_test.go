package natsjs

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/publish/natsjs/natstest"
	"github.com/walpost/walpost/internal/publish/sinktest"
	"github.com/walpost/walpost/internal/testutil"
)

// authServer starts a private server (the shared one has no
// authorization) with a user that may publish, one that may not publish
// to the test's subjects, and a stream for them.
func authServer(t *testing.T) (url, prefix string) {
	prefix = natstest.Unique(t)
	url = natstest.StartPrivate(t, `authorization {
  users: [
    {user: writer, password: "s3cretWRITER"},
    {user: reader, password: "s3cretREADER", permissions: {publish: {deny: ["`+prefix+`.>"]}}}
  ]
}`)
	natstest.CreateStream(t, strings.Replace(url, "nats://", "nats://writer:s3cretWRITER@", 1),
		jetstream.StreamConfig{Name: prefix, Subjects: []string{prefix + ".>"}})
	return url, prefix
}

// TestIntegrationBadCredentialsArePermanentAndNeverPrinted: a wrong
// password, a wrong token and a wrong password inside a server URL are
// Permanent errors that say to check the credentials, and neither the
// error nor the sink's log holds the secret.
func TestIntegrationBadCredentialsArePermanentAndNeverPrinted(t *testing.T) {
	url, prefix := authServer(t)
	hostport := strings.TrimPrefix(url, "nats://")
	for _, c := range []struct{ settings, secret string }{
		{"servers: [\"" + url + "\"]\nuser: writer\npassword: \"s3cretWRONG\"\n", "s3cretWRONG"},
		{"servers: [\"" + url + "\"]\ntoken: \"s3cretTOKEN\"\n", "s3cretTOKEN"},
		{"servers: [\"nats://writer:s3cretURLPW@" + hostport + "\"]\n", "s3cretURLPW"},
	} {
		var logs testutil.Buffer
		doc := "name: events\nkind: nats\nconnect_timeout: 2s\nsubject: " + prefix + ".{type}\n" + c.settings
		open, err := publish.Prepare(0, sinktest.SinkConfig(t, doc), zerolog.New(&logs))
		if err != nil {
			t.Fatal(err)
		}
		s, err := open(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		err = s.Publish(t.Context(), []*message.Message{sinktest.NewGen(1).Message("k")})
		s.Close()
		if !publish.IsPermanent(err) || !strings.Contains(err.Error(), "check credentials_file, nkey_seed_file, token or user and password") {
			t.Errorf("%s: Publish = %v, want a Permanent error about the credentials", c.settings, err)
		}
		for _, text := range []string{err.Error(), logs.String()} {
			if strings.Contains(text, c.secret) || strings.Contains(text, "s3cret") {
				t.Errorf("%s: the secret is repeated: %s", c.settings, text)
			}
		}
	}
}

// TestIntegrationPublishPermissionDeniedIsPermanent: a user the server
// does not let publish to the subject gets a Permanent error naming the
// permissions, at once rather than after ack_timeout.
func TestIntegrationPublishPermissionDeniedIsPermanent(t *testing.T) {
	url, prefix := authServer(t)
	s := newSink(t, "servers: [\""+url+"\"]\nuser: reader\npassword: \"s3cretREADER\"\nsubject: "+prefix+".{type}\n")
	start := time.Now()
	err := s.Publish(sinktest.Context(t, 30*time.Second), []*message.Message{sinktest.NewGen(1).Message("k")})
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("took %s (ack_timeout is 5s)", el)
	}
	if !publish.IsPermanent(err) || publish.IsRejected(err) || !strings.Contains(err.Error(), "permissions") {
		t.Fatalf("Publish = %v, want a Permanent error about permissions", err)
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("the password is repeated: %v", err)
	}
}

// TestConfigErrorsNeverRepeatAPassword: a malformed server URL with a
// password in it is refused without the password.
func TestConfigErrorsNeverRepeatAPassword(t *testing.T) {
	for _, sv := range []string{"nats://u:s3cretPW@h:port", "http://u:s3cretPW@h:4222", "nats://u:s3cretPW@h:4222/path", "u:s3cretPW@h"} {
		doc := "name: events\nkind: nats\nsubject: s\nservers: [\"" + sv + "\"]\n"
		_, err := publish.Prepare(0, sinktest.SinkConfig(t, doc), zerolog.Nop())
		if err == nil || !strings.Contains(err.Error(), "servers[0]") || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: err = %v, want one naming servers[0] without the password", sv, err)
		}
	}
}
