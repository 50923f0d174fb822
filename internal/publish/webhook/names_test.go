package webhook

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish/sinktest"
)

// TestURLIsNotATemplate: no message chooses where a webhook request goes.
// A url holding {type} or {key} (as written or percent-encoded) is
// refused at configuration time, without repeating the URL; and whatever
// a message's type and key hold (path separators, '?', '#', '@', a
// scheme), every request goes to the configured host and path.
func TestURLIsNotATemplate(t *testing.T) {
	for _, u := range []string{"http://h/{type}", "http://h/x?t={key}", "http://h/%7Btype%7D", "http://h/%7bkey%7d/x", "http://h/{TYPE}"} {
		doc := "name: hook\nkind: webhook\nurl: '" + u + "'\n"
		_, err := New(sinktest.SinkConfig(t, doc), zerolog.Nop())
		if err == nil || !strings.Contains(err.Error(), "url: holds {type} or {key}, but the webhook URL is not a template") || strings.Contains(err.Error(), "h/") {
			t.Errorf("url %s: err = %v, want the template refusal, without the URL", u, err)
		}
	}

	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Host+" "+r.URL.RequestURI())
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	s := newSink(t, srv.URL+"/hook/in?tenant=a")
	g := sinktest.NewGen(7)
	var msgs []*message.Message
	for _, v := range []string{"../admin", "x?tenant=b", "x#y", "@evil.example", "http://evil.example/", "%2F..%2Fadmin", "a/b"} {
		m := g.Message(v)
		m.Type = v
		msgs = append(msgs, m)
	}
	if err := s.Publish(sinktest.Context(t, 30*time.Second), msgs); err != nil {
		t.Fatal(err)
	}
	want := strings.TrimPrefix(srv.URL, "http://") + " /hook/in?tenant=a"
	if len(got) != len(msgs) {
		t.Fatalf("%d requests, want %d", len(got), len(msgs))
	}
	for i, r := range got {
		if r != want {
			t.Errorf("request %d (type %q) went to %s, want %s", i, msgs[i].Type, r, want)
		}
	}
}
