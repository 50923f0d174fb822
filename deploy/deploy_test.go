package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"go.yaml.in/yaml/v3"

	"github.com/walpost/walpost/internal/config"
	_ "github.com/walpost/walpost/internal/publish/kafka"      // registers kind: kafka, as cmd/cdc does
	_ "github.com/walpost/walpost/internal/publish/servicebus" // registers kind: servicebus
	"github.com/walpost/walpost/internal/relay"
)

// root is the repository root, seen from this package's directory.
const root = ".."

// The paths the deployment files agree on.
const (
	configPath = "/etc/walpost/cdc.yaml" // the Dockerfile's CMD, compose's and Kubernetes' mounts
)

// yamlDocs decodes every document of a YAML file.
func yamlDocs(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var docs []map[string]any
	d := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var doc map[string]any
		err := d.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if doc != nil {
			docs = append(docs, doc)
		}
	}
	return docs
}

// yamlDoc decodes a file of exactly one YAML document.
func yamlDoc(t *testing.T, path string) map[string]any {
	t.Helper()
	docs := yamlDocs(t, path)
	if len(docs) != 1 {
		t.Fatalf("%s: %d YAML documents, want 1", path, len(docs))
	}
	return docs[0]
}

// dig walks maps by key and lists by index ("0"); nil when a step is missing.
func dig(v any, path ...string) any {
	for _, p := range path {
		switch x := v.(type) {
		case map[string]any:
			v = x[p]
		case []any:
			i, err := strconv.Atoi(p)
			if err != nil || i < 0 || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

func str(v any) string {
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

func list(v any) []any { l, _ := v.([]any); return l }

func obj(v any) map[string]any { m, _ := v.(map[string]any); return m }

// loadConfig loads a walpost config the way cdc does (config.Parse, then
// relay.New, which checks every sink's settings), with env standing for
// the container's whole environment: a ${VAR} or CDC_* variable the
// container does not get is not taken from the test's environment.
func loadConfig(t *testing.T, what string, b []byte, env map[string]string) *config.Config {
	t.Helper()
	cfg, err := config.Parse(b, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatalf("%s: the config does not load with the env its container gets: %v", what, err)
	}
	r, err := relay.New(cfg, zerolog.Nop(), nil)
	if err != nil {
		t.Fatalf("%s: the sinks' settings are refused: %v", what, err)
	}
	r.Close()
	return cfg
}

// listenPort is the port of http.listen.
func listenPort(t *testing.T, cfg *config.Config) int {
	t.Helper()
	_, p, err := net.SplitHostPort(cfg.HTTP.Listen)
	if err != nil {
		t.Fatalf("http.listen %q: %v", cfg.HTTP.Listen, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("http.listen %q: port: %v", cfg.HTTP.Listen, err)
	}
	return n
}

// rawSinks returns the sinks of a config file as plain YAML maps, to read
// a sink kind's own settings.
func rawSinks(t *testing.T, b []byte) []map[string]any {
	t.Helper()
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, s := range list(doc["sinks"]) {
		out = append(out, obj(s))
	}
	return out
}

func TestEveryYAMLAndJSONFileParses(t *testing.T) {
	files := []string{filepath.Join(root, "docker-compose.yml")}
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && (strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml") || strings.HasSuffix(p, ".json")) {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 10 {
		t.Fatalf("found only %d YAML/JSON files under deploy/: %v", len(files), files)
	}
	for _, f := range files {
		if strings.HasSuffix(f, ".json") {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var v any
			if err := json.Unmarshal(b, &v); err != nil {
				t.Errorf("%s: %v", f, err)
			}
			continue
		}
		if docs := yamlDocs(t, f); len(docs) == 0 {
			t.Errorf("%s: no YAML document", f)
		}
	}
}

// sqlGrants returns the GRANT statements of an SQL file, normalised
// (whitespace collapsed, no trailing semicolon), and the role each
// CREATE ROLE names.
func sqlGrants(t *testing.T, path string) (grants map[string]bool, roles []string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	grants = map[string]bool{}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if i := strings.Index(l, "--"); i >= 0 {
			l = l[:i]
		}
		lines = append(lines, l)
	}
	for _, stmt := range strings.Split(strings.Join(lines, " "), ";") {
		stmt = strings.Join(strings.Fields(stmt), " ")
		if strings.HasPrefix(stmt, "GRANT ") {
			grants[stmt] = true
		}
	}
	for _, m := range regexp.MustCompile(`(?i)CREATE ROLE (\w+)`).FindAllStringSubmatch(string(b), -1) {
		roles = append(roles, m[1])
	}
	return grants, roles
}

// relayRole is the role sql/roles.sql creates for cdc run.
func relayRole(t *testing.T) string {
	t.Helper()
	_, roles := sqlGrants(t, filepath.Join(root, "sql", "roles.sql"))
	if len(roles) != 1 {
		t.Fatalf("sql/roles.sql creates roles %v, want one", roles)
	}
	return roles[0]
}
