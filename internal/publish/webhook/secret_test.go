package webhook

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish/sinktest"
	"github.com/walpost/walpost/internal/redact"
)

// The secrets of the tests below: none may appear in an error or a log
// line.
const (
	urlUser     = "hookuser"
	urlPassword = "pAsSw0rdInUrl"
	pathToken   = "T0KENinPATH"
	queryToken  = "T0KENinQUERY"
	headerToken = "Bearer h3aderT0KEN"
	signSecret  = "s1gningS3CRET"
)

var allSecrets = []string{urlPassword, pathToken, queryToken, headerToken, signSecret}

func requireNoSecret(t *testing.T, what, text string) {
	t.Helper()
	for _, s := range allSecrets {
		if strings.Contains(text, s) {
			t.Errorf("%s repeats the secret %q: %s", what, s, text)
		}
	}
}

// TestConfigErrorsDoNotRepeatSecrets: a bad URL, a bad header value and
// every other field error leave the URL, its password and tokens, the
// header values and the secret out.
func TestConfigErrorsDoNotRepeatSecrets(t *testing.T) {
	for _, doc := range []string{
		"url: 'ftp://" + urlUser + ":" + urlPassword + "@h/" + pathToken + "?t=" + queryToken + "'",
		"url: 'http://" + urlUser + ":" + urlPassword + "@h/%zz" + pathToken + "'",
		"url: 'http://" + urlUser + ":" + urlPassword + "@h/" + pathToken + "#" + queryToken + "'",
		"url: 'https:///" + pathToken + "'",
		"url: http://h\nheaders: {Authorization: \"" + headerToken + "\\r\\n\"}",
		"url: http://h\nheaders: {Content-Type: \"" + headerToken + "\"}",
		"url: http://h\nsecret: " + signSecret + "\ntimeout: 1ms",
		"url: 'http://h/" + pathToken + "'\nsecret: " + signSecret + "\nheaders: {Authorization: '" + headerToken + "'}\ntls: {ca_file: x}",
	} {
		_, err := New(sinktest.SinkConfig(t, "name: hook\nkind: webhook\n"+doc), zerolog.Nop())
		if err == nil {
			t.Fatalf("%q: no error", doc)
		}
		requireNoSecret(t, "config error", err.Error())
	}
}

// TestRuntimeErrorsAndLogsDoNotRepeatSecrets: errors of refused,
// failed and unreachable requests, and the sink's log lines, name the
// endpoint by scheme and host only, and an answer that echoes what it was
// sent (headers, its own path) is quoted with the secrets replaced.
func TestRuntimeErrorsAndLogsDoNotRepeatSecrets(t *testing.T) {
	rc := newReceiver(t)
	var logs bytes.Buffer
	u := strings.Replace(rc.srv.URL, "http://", "http://"+urlUser+":"+urlPassword+"@", 1) + "/hooks/" + pathToken + "?token=" + queryToken
	log := zerolog.New(&logs)
	sinks := []*Sink{
		newSinkLog(t, log, u, "headers: {Authorization: '"+headerToken+"'}", "secret: "+signSecret, "max_retry_after: 10ms"),
		newSinkLog(t, log, u, "secret: "+signSecret, "max_retry_after: 10ms"), // Basic authentication from the URL
	}
	var echoed strings.Builder
	rc.setAnswer(func(w http.ResponseWriter, r request) bool {
		user, pw, _ := (&http.Request{Header: r.header}).BasicAuth()
		var b strings.Builder
		b.WriteString("Cannot POST /hooks/" + pathToken + "?token=" + queryToken + " with " + signSecret + "\n")
		b.WriteString("Authorization: " + r.header.Get("Authorization") + " (" + user + ":" + pw + ")\n")
		echoed.WriteString(b.String())
		w.Header().Set("Retry-After", "1")
		http.Error(w, b.String(), status(r))
		return true
	})
	for _, s := range sinks {
		for _, code := range []int{400, 401, 404, 429, 500, 302} {
			m := sinktest.NewGen(31).Interleave(1, "a")[0]
			m.Headers["x-status"] = strconv.Itoa(code)
			err := s.Publish(sinktest.Context(t, 10*time.Second), []*message.Message{m})
			if err == nil {
				t.Fatalf("status %d: no error", code)
			}
			if !strings.Contains(err.Error(), redact.Mask) || !strings.Contains(err.Error(), strconv.Itoa(code)) {
				t.Errorf("status %d: error %q does not quote the answer's body (with secrets replaced)", code, err)
			}
			requireNoSecret(t, "error", err.Error())
			if strings.Contains(err.Error(), urlUser) {
				t.Errorf("error names the URL's user: %s", err)
			}
		}
	}
	// The answers did carry the secrets: the checks above can fail.
	for _, s := range []string{headerToken, urlUser + ":" + urlPassword, pathToken, queryToken, signSecret} {
		if !strings.Contains(echoed.String(), s) {
			t.Fatalf("test bug: the answers did not echo %q: %s", s, echoed.String())
		}
	}
	rc.srv.Close()
	err := sinks[0].Publish(sinktest.Context(t, 10*time.Second), sinktest.NewGen(32).Interleave(1, "a"))
	if err == nil {
		t.Fatal("no error with the endpoint gone")
	}
	requireNoSecret(t, "error", err.Error())
	requireNoSecret(t, "log", logs.String())
	if !strings.Contains(logs.String(), "webhook sink configured") || !strings.Contains(logs.String(), "Retry-After") {
		t.Errorf("test bug: the sink did not log what it should: %s", logs.String())
	}
}

// TestEchoedSecretsInEscapedFormsAreRedacted: an answer that echoes what
// it was sent JSON-encoded (quotes and '<' escaped), percent-encoded, or
// as the Basic authentication header's base64 is quoted with the secrets
// cut out all the same.
func TestEchoedSecretsInEscapedFormsAreRedacted(t *testing.T) {
	const (
		token  = `Bearer tok"en<with>esc` // JSON: tok\"en\u003cwith\u003eesc
		secret = `sig"secret&more`
		pw     = "pw/with spaces"
	)
	rc := newReceiver(t)
	u := strings.Replace(rc.srv.URL, "http://", "http://user1:"+strings.NewReplacer("/", "%2F", " ", "%20").Replace(pw)+"@", 1) + "/p?k=v%2Fq%20r"
	s := newSink(t, u, "headers: {X-Token: '"+token+"'}", "secret: '"+secret+"'")
	rc.setAnswer(func(w http.ResponseWriter, r request) bool {
		echo, _ := json.Marshal(map[string]string{
			"token": r.header.Get("X-Token"), "bare": strings.TrimPrefix(r.header.Get("X-Token"), "Bearer "),
			"secret": secret, "auth": r.header.Get("Authorization"), "query": "v/q r", "pw": pw,
		})
		w.WriteHeader(http.StatusBadRequest)
		w.Write(echo)
		return true
	})
	err := s.Publish(sinktest.Context(t, 10*time.Second), sinktest.NewGen(33).Interleave(1, "a"))
	if err == nil {
		t.Fatal("no error")
	}
	for _, frag := range []string{"en<with", `en\\u003cwith`, "secret&", `secret\\u0026`, "dXNlcjE6", "with spaces", "v/q r"} {
		if strings.Contains(err.Error(), frag) {
			t.Errorf("error holds %q: %s", frag, err)
		}
	}
	if !strings.Contains(err.Error(), redact.Mask) {
		t.Errorf("error %q does not quote the answer with the secrets replaced", err)
	}
}

// status is the answer a request asks for in its X-Status header.
func status(r request) int {
	n, _ := strconv.Atoi(r.header.Get("X-Status"))
	return n
}
