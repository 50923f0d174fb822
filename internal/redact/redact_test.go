package redact

import (
	"encoding/json"
	"fmt"
	"github.com/walpost/walpost/internal/testutil"
	"strings"
	"sync"
	"testing"
)

func TestURLHidesPasswordsAndKeepsTheRest(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"postgres://app:s3cret@db.example:5432/app?sslmode=require", "postgres://app:xxxxx@db.example:5432/app?sslmode=require"},
		{"postgresql://app@h1:5432,h2:5433/app", "postgresql://app@h1:5432,h2:5433/app"},
		{"postgres://app@h/app?application_name=walpost&password=s3cret", "postgres://app@h/app?application_name=walpost&password=xxxxx"},
		{"postgres://app@h/app?password=s3&cret=x", "postgres://app@h/app?password=xxxxx"},
		{"postgres://app@h/app?sslpassword=s3cret", "postgres://app@h/app?sslpassword=xxxxx"},
		{"postgres://app@h/app?pass%77ord=s3cret", "postgres://app@h/app?pass%77ord=xxxxx"},
		{"postgres://app:s3cret@[::1]:5432/app", "postgres://app:xxxxx@[::1]:5432/app"},
		{"postgres://%2Fvar%2Frun%2Fpostgresql/app", "postgres://%2Fvar%2Frun%2Fpostgresql/app"},
		{"host=h user=app password=s3cret dbname=app", "host=h user=app password=xxxxx dbname=app"},
		{"host=h password='s3 cret' dbname=app", "host=h password=xxxxx dbname=app"},
		{`host=h password = 's3\'cret'`, "host=h password=xxxxx"},
		{"host=h passwd=s3cret", "host=h passwd=xxxxx"},
		{"", ""},
	} {
		if got := URL(c.in); got != c.want {
			t.Errorf("URL(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestURLNeverShowsAPasswordOfAMalformedString: where the password ends
// cannot be told, more is hidden, and URLSecrets lists what was hidden so
// that a Set built from it removes the password from the raw string.
func TestURLNeverShowsAPasswordOfAMalformedString(t *testing.T) {
	const pw = "Sup3rS3cret"
	for _, in := range []string{
		"postgres://u:" + pw + "@h/%zz",
		"postgres://u:Sup3r@S3cret@h/db",    // an unescaped '@'
		"postgres://u:Sup3r/S3cret@h/db",    // an unescaped '/': libpq takes "u" for the host
		"postgres://u:Sup3r?S3cret@h/db",    // an unescaped '?'
		"postgres://u:Sup3r#S3cret@h/db",    // an unescaped '#'
		"postgres://u:Sup3r S3cret@h/db",    // a space
		"postgres://u:" + pw,                // no host: libpq takes the password for a port
		"postgres://u:" + pw + "@[::1",      // an unclosed bracket
		"postgres://u:" + pw + "@h:port/db", // a bad port
		"postgres://u@h/db?password=" + pw + "=x",
		"postgres://u@h/db?password" + pw,      // a missing '='
		"host=h password='" + pw + " dbname=d", // an unterminated quote
		"host='h password=" + pw,
		"host=h password" + pw,
		"host=h password= " + pw,
		"postgres:/u:" + pw + "@h/db", // not quite a URL
		pw,
		"Sup3r\x00S3cret://x:y@z",
	} {
		out := URL(in)
		for _, piece := range []string{pw, "Sup3r", "S3cret"} {
			if strings.Contains(out, piece) {
				t.Errorf("URL(%q) = %q shows %q", in, out, piece)
			}
		}
		if got := NewSet(URLSecrets(in)...).Redact(in); strings.Contains(got, "S3cret") {
			t.Errorf("a Set of URLSecrets(%q) = %q leaves %q", in, URLSecrets(in), got)
		}
	}
}

func TestURLSecretsListsRawAndDecodedForms(t *testing.T) {
	got := URLSecrets("postgres://u:p%40ss%2Fword@h/db?sslpassword=k%20ey")
	for _, want := range []string{"p%40ss%2Fword", "p@ss/word", "k%20ey", "k ey"} {
		if !strings.Contains(strings.Join(got, "\n"), want) {
			t.Errorf("URLSecrets = %q, want %q among them", got, want)
		}
	}
	got = URLSecrets(`host=h password='it\'s'`)
	if len(got) != 2 || got[0] != `'it\'s'` || got[1] != "it's" {
		t.Errorf("URLSecrets of a key/value string = %q", got)
	}
}

func TestConnectionStringHidesTheKey(t *testing.T) {
	const key = "s3cretKEY+/a="
	for _, c := range []struct{ in, want string }{
		{"Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=send;SharedAccessKey=" + key,
			"Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=send;SharedAccessKey=xxxxx"},
		{"endpoint=sb://ns.servicebus.windows.net/;sharedaccesskeyname=send;sharedaccesskey=" + key + ";",
			"endpoint=sb://ns.servicebus.windows.net/;sharedaccesskeyname=send;sharedaccesskey=xxxxx;"},
		{"Endpoint=sb://ns/;SharedAccessSignature=SharedAccessSignature sr=a&sig=" + key + "&se=1&skn=send",
			"Endpoint=sb://ns/;SharedAccessSignature=xxxxx"},
		{"Endpoint=sb://localhost:5672;SharedAccessKeyName=a;SharedAccessKey=" + key + ";UseDevelopmentEmulator=true",
			"Endpoint=sb://localhost:5672;SharedAccessKeyName=a;SharedAccessKey=xxxxx;UseDevelopmentEmulator=true"},
		// Malformed: only the endpoint host is kept.
		{"Endpoint=sb://ns.servicebus.windows.net/,SharedAccessKeyName=send,SharedAccessKey=" + key, "Endpoint=sb://ns.servicebus.windows.net/;…"},
		{"Endpoint=sb://ns/;SharedAccessKeyName=send;SharedAccessKey" + key, "Endpoint=sb://ns/;…"},
		{"Endpoint=sb://ns/;SharedAccessKeyName=send;SharedAccessKey=" + key + " trailing", "Endpoint=sb://ns/;SharedAccessKeyName=send;SharedAccessKey=xxxxx"},
		{"Endpoint=sb://ns/;SharedAccessKeyName=send key;SharedAccessKey=" + key, "Endpoint=sb://ns/;…"},
		{"Endpoint=sb://ns/;SharedAccesKey=" + key, "Endpoint=sb://ns/;…"},
		{key, "<unparseable connection string>"},
		{"SharedAccessKey=" + key + ",Endpoint=sb://ns/", "SharedAccessKey=xxxxx"},
	} {
		if got := ConnectionString(c.in); got != c.want {
			t.Errorf("ConnectionString(%q) = %q, want %q", c.in, got, c.want)
		}
		if got := NewSet(ConnectionStringSecrets(c.in)...).Redact("error: " + c.in); strings.Contains(got, "s3cret") {
			t.Errorf("a Set of ConnectionStringSecrets(%q) leaves %q", c.in, got)
		}
	}
	got := ConnectionStringSecrets("Endpoint=sb://ns/,SharedAccessKeyName=send,SharedAccessKey=" + key + ",EntityPath=q")
	if !contains(got, key) {
		t.Errorf("ConnectionStringSecrets of a comma-separated string = %q, want %q among them", got, key)
	}
}

func TestIsSecretKey(t *testing.T) {
	for key, want := range map[string]bool{
		"password": true, "Password": true, "sasl.password": true, "passwd": true, "pwd": true, "secret": true,
		"client_secret": true, "token": true, "bearer_token": true, "connection_string": true, "connectionString": true,
		"SharedAccessKey": true, "SharedAccessSignature": true, "sas": true, "sas_key": true, "shared_access_key": true,
		"nkey": true, "api_key": true, "apiKey": true, "API-KEY": true, "private_key": true, "sslpassword": true,
		"credentials": true, "dsn": true, "Authorization": true, "proxy_authorization": true, "user_nkey": true, "nkey_seed": true,
		"key_file": false, "cert_file": false, "ca_file": false, "password_file": false, "token_url": false,
		"SharedAccessKeyName": false, "username": false, "sasl": false, "mechanism": false, "key": false,
		"partition_key": false, "monkey": false, "brokers": false, "topic": false, "url": false, "passthrough": false, "": false,
	} {
		if got := IsSecretKey(key); got != want {
			t.Errorf("IsSecretKey(%q) = %v, want %v", key, got, want)
		}
	}
}

func TestSetRedactsEveryOccurrenceAndEscapedForm(t *testing.T) {
	const pw = `p"a\ss` + "\n" + `<wörd>`
	s := NewSet(pw, "abc", "")
	js, _ := json.Marshal(map[string]string{"error": "auth failed for " + pw})
	for _, text := range []string{
		"auth failed for " + pw + " and again " + pw,
		string(js),
		fmt.Sprintf("auth failed for %q", pw),
	} {
		got := s.Redact(text)
		if strings.Contains(got, "wörd") || strings.Contains(got, "ss") || !strings.Contains(got, Mask) {
			t.Errorf("Redact(%q) = %q", text, got)
		}
	}
	if got := s.Redact("abc is too short to redact"); got != "abc is too short to redact" {
		t.Errorf("a secret under MinLen was redacted: %q", got)
	}
	// Overlapping secrets leave no piece of either.
	s = NewSet("abcdef", "defghi")
	if got := s.Redact("xxabcdefghixx"); got != "xx"+Mask+"xx" {
		t.Errorf("overlap: %q", got)
	}
	var nilSet *Set
	if nilSet.Redact("text") != "text" {
		t.Error("a nil Set changed text")
	}
}

func TestWriterRedactsEachWriteAndIsSafeForConcurrentUse(t *testing.T) {
	s := NewSet("hunter22")
	var buf testutil.Buffer
	w := s.Writer(&buf)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 50 {
				if i == 0 && j == 0 {
					s.Add("added-later-secret")
				}
				line := fmt.Sprintf(`{"level":"error","error":"password hunter22 refused","n":%d}`+"\n", j)
				if n, err := w.Write([]byte(line)); err != nil || n != len(line) {
					t.Errorf("Write = %d, %v; want %d, nil", n, err, len(line))
				}
			}
		}()
	}
	wg.Wait()
	if strings.Contains(buf.String(), "hunter22") || strings.Count(buf.String(), "\n") != 400 {
		t.Fatalf("output holds the secret or lost lines:\n%.300s", buf.String())
	}
	buf.Reset()
	io := "nothing secret here\n"
	if _, err := w.Write([]byte(io)); err != nil || buf.String() != io {
		t.Fatalf("clean text changed: %q", buf.String())
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// FuzzURL: whatever a password holds, URL never shows it, in a URL or in
// a key/value string, quoted or not.
func FuzzURL(f *testing.F) {
	for _, s := range []string{"s3cret", "p@ss/w:rd?#", "a b", "'q'", `a\b`, "%zz", "x=y z", "@@@@"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, pw string) {
		for _, in := range []string{
			"postgres://user:" + pw + "@host:5432/db?sslmode=disable",
			"postgresql://user@host/db?password=" + pw,
			"host=host password=" + pw + " dbname=db",
			"host=host password='" + strings.ReplaceAll(strings.ReplaceAll(pw, `\`, `\\`), "'", `\'`) + "' dbname=db",
		} {
			// Mask is taken out first: "xxxxx 0=" is not a password "x 0=".
			out := strings.ReplaceAll(URL(in), Mask, "\x00")
			if len(pw) >= 4 && strings.Contains(out, pw) && !strings.Contains(pw, "\x00") &&
				!strings.Contains("postgres://user:@host:5432/db?sslmode=disable host=host password= dbname=db …", pw) {
				t.Errorf("URL(%q) = %q shows the password", in, out)
			}
		}
	})
}
