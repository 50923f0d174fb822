package deploy

import (
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// composeVarRE matches compose's interpolation: ${VAR}, ${VAR:-default}, ${VAR-default}.
var composeVarRE = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?-)([^}]*))?\}`)

// interpolate resolves compose's ${VAR} references as `docker compose up`
// does on a machine with none of them set and no .env file: a reference
// without a default is an error, so that the file works as checked out.
func interpolate(s string) (string, error) {
	var missing []string
	out := composeVarRE.ReplaceAllStringFunc(s, func(ref string) string {
		m := composeVarRE.FindStringSubmatch(ref)
		if m[2] == "" {
			missing = append(missing, m[1])
			return ""
		}
		return m[3]
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("${%s} has no default", strings.Join(missing, "}, ${"))
	}
	return strings.ReplaceAll(out, "$$", "$"), nil
}

type composeFile struct {
	services map[string]map[string]any
}

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	doc := yamlDoc(t, filepath.Join(root, "docker-compose.yml"))
	c := composeFile{services: map[string]map[string]any{}}
	for name, s := range obj(doc["services"]) {
		c.services[name] = obj(s)
	}
	if len(c.services) == 0 {
		t.Fatal("docker-compose.yml: no services")
	}
	return c
}

// env returns a service's environment, interpolated.
func (c composeFile) env(t *testing.T, name string) map[string]string {
	t.Helper()
	out := map[string]string{}
	add := func(k, v string) {
		iv, err := interpolate(v)
		if err != nil {
			t.Errorf("docker-compose.yml: services.%s.environment.%s: %v", name, k, err)
		}
		out[k] = iv
	}
	switch e := c.services[name]["environment"].(type) {
	case map[string]any:
		for k, v := range e {
			add(k, str(v))
		}
	case []any:
		for _, kv := range e {
			k, v, _ := strings.Cut(str(kv), "=")
			add(k, v)
		}
	}
	return out
}

func (c composeFile) strings(name, key string) []string {
	var out []string
	for _, v := range list(c.services[name][key]) {
		s, _ := interpolate(str(v))
		out = append(out, s)
	}
	return out
}

// cdcServices returns the services that run the walpost image with a
// config mounted, and for each the host file mounted at the config path
// and the arguments it runs (its command, else the Dockerfile's CMD).
func (c composeFile) cdcServices(t *testing.T, df dockerfile) map[string]struct {
	config string
	args   []string
} {
	t.Helper()
	out := map[string]struct {
		config string
		args   []string
	}{}
	for name, s := range c.services {
		if s["build"] == nil {
			continue // not built from the Dockerfile
		}
		var host string
		for _, v := range c.strings(name, "volumes") {
			parts := strings.Split(v, ":")
			if len(parts) >= 2 && parts[1] == configPath {
				host = parts[0]
			}
		}
		if host == "" {
			t.Errorf("docker-compose.yml: service %s builds the Dockerfile but mounts no config at %s", name, configPath)
			continue
		}
		args := c.strings(name, "command")
		if args == nil {
			args = df.runtime().cmd
		}
		out[name] = struct {
			config string
			args   []string
		}{filepath.Join(root, host), args}
	}
	return out
}

// configFlag returns the value of --config in args.
func configFlag(args []string) string {
	for i, a := range args {
		if a == "--config" && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, "--config="); ok {
			return v
		}
	}
	return ""
}

func TestComposeSampleConfigLoadsInEveryServiceThatRunsCdc(t *testing.T) {
	c := loadCompose(t)
	df := parseDockerfile(t)
	role := relayRole(t)
	services := c.cdcServices(t, df)
	var commands []string
	for name, svc := range services {
		commands = append(commands, svc.args[0])
		if got := configFlag(svc.args); got != configPath {
			t.Errorf("docker-compose.yml: service %s runs %v: --config %q, want the mounted %s", name, svc.args, got, configPath)
		}
		b, err := os.ReadFile(svc.config)
		if err != nil {
			t.Fatal(err)
		}
		env := c.env(t, name)
		cfg := loadConfig(t, "docker-compose.yml service "+name+" ("+svc.config+")", b, env)

		// Postgres is the compose service the URL names, with logical WAL.
		host := urlHost(t, cfg.Postgres.URL)
		if c.services[host] == nil {
			t.Errorf("service %s: postgres.url host %q is not a compose service", name, host)
		} else if !slices.Contains(c.strings(host, "command"), "wal_level=logical") {
			t.Errorf("service %s: postgres.url names service %s, which does not run with wal_level=logical", name, host)
		}

		// Every Kafka sink reaches the compose broker on its advertised
		// listener and may create topics, as the broker allows.
		for _, s := range rawSinks(t, b) {
			if s["kind"] != "kafka" {
				continue
			}
			if s["auto_create_topics"] != true {
				t.Errorf("%s: sink %v: auto_create_topics is not true (the compose broker starts with no topics)", svc.config, s["name"])
			}
			for _, br := range list(s["brokers"]) {
				bhost, _, err := net.SplitHostPort(str(br))
				if err != nil || c.services[bhost] == nil {
					t.Errorf("%s: broker %v is not a compose service's host:port", svc.config, br)
					continue
				}
				kenv := c.env(t, bhost)
				if !strings.Contains(","+kenv["KAFKA_ADVERTISED_LISTENERS"]+",", "://"+str(br)+",") {
					t.Errorf("%s: broker %v is not among service %s's KAFKA_ADVERTISED_LISTENERS %q", svc.config, br, bhost, kenv["KAFKA_ADVERTISED_LISTENERS"])
				}
				if kenv["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] != "true" {
					t.Errorf("service %s: KAFKA_AUTO_CREATE_TOPICS_ENABLE is %q, want true", bhost, kenv["KAFKA_AUTO_CREATE_TOPICS_ENABLE"])
				}
			}
		}

		if svc.args[0] != "run" {
			continue
		}
		// The relay: least privilege, metrics reachable from the host,
		// time to drain before SIGKILL.
		if env["PGUSER"] != role {
			t.Errorf("service %s runs cdc run as PGUSER=%q, want %s (sql/roles.sql)", name, env["PGUSER"], role)
		}
		lhost, _, _ := net.SplitHostPort(cfg.HTTP.Listen)
		if lhost != "0.0.0.0" && lhost != "" {
			t.Errorf("service %s: http.listen %q is not reachable through a published port; listen on 0.0.0.0", name, cfg.HTTP.Listen)
		}
		port := fmt.Sprint(listenPort(t, cfg))
		published := false
		for _, p := range c.strings(name, "ports") {
			if strings.HasSuffix(p, ":"+port) {
				published = true
			}
		}
		if !published {
			t.Errorf("service %s: http.listen port %s is not published (ports %v)", name, port, c.strings(name, "ports"))
		}
		grace, err := time.ParseDuration(str(c.services[name]["stop_grace_period"]))
		if err != nil {
			t.Errorf("service %s: stop_grace_period: %v (compose's default 10s is below relay.shutdown_timeout)", name, err)
		} else if grace <= cfg.Relay.ShutdownTimeout.D() {
			t.Errorf("service %s: stop_grace_period %s is not above relay.shutdown_timeout %s", name, grace, cfg.Relay.ShutdownTimeout.D())
		}
	}
	slices.Sort(commands)
	if !slices.Equal(commands, []string{"init", "run"}) {
		t.Errorf("docker-compose.yml: services built from the Dockerfile run %v, want one init and one run", commands)
	}
}

func urlHost(t *testing.T, url string) string {
	t.Helper()
	m := regexp.MustCompile(`^postgres(?:ql)?://[^@/]*@([^:/?]+)`).FindStringSubmatch(url)
	if m == nil {
		t.Fatalf("postgres.url: no host found")
	}
	return m[1]
}

func TestComposeServicesStartInOrder(t *testing.T) {
	c := loadCompose(t)
	for name := range c.services {
		for dep, cond := range obj(c.services[name]["depends_on"]) {
			target := c.services[dep]
			if target == nil {
				t.Errorf("service %s depends on %s, which does not exist", name, dep)
				continue
			}
			switch cnd := str(dig(cond, "condition")); cnd {
			case "service_healthy":
				if target["healthcheck"] == nil {
					t.Errorf("service %s waits for %s to be healthy, which has no healthcheck", name, dep)
				}
			case "service_completed_successfully":
				if r := str(target["restart"]); r != "no" {
					t.Errorf("service %s waits for %s to complete, whose restart is %q (want \"no\")", name, dep, r)
				}
			default:
				t.Errorf("service %s depends on %s with condition %q: want service_healthy or service_completed_successfully", name, dep, cnd)
			}
		}
	}
	// The order the relay needs: Postgres up, cdc init, the relay role
	// (on the tables init made), then cdc run with Kafka healthy.
	want := map[string]map[string]string{
		"cdc-init":   {"postgres": "service_healthy"},
		"relay-role": {"cdc-init": "service_completed_successfully"},
		"cdc":        {"relay-role": "service_completed_successfully", "kafka": "service_healthy"},
	}
	for name, deps := range want {
		for dep, cnd := range deps {
			if got := str(dig(c.services[name], "depends_on", dep, "condition")); got != cnd {
				t.Errorf("service %s: depends_on %s: condition %q, want %q", name, dep, got, cnd)
			}
		}
	}
	// A system cluster usually has 5432.
	for _, p := range c.strings("postgres", "ports") {
		if parts := strings.Split(p, ":"); len(parts) >= 2 && parts[len(parts)-2] == "5432" {
			t.Errorf("service postgres publishes host port 5432 (%q), which a system cluster may hold", p)
		}
	}
	// KRaft formats its storage with CLUSTER_ID: a base64url 16-byte id.
	id := c.env(t, "kafka")["CLUSTER_ID"]
	if b, err := base64.RawURLEncoding.Strict().DecodeString(id); err != nil || len(b) != 16 {
		t.Errorf("service kafka: CLUSTER_ID %q is not the base64url of 16 bytes (%v)", id, err)
	}
}

func TestComposeRelayRoleGrantsWhatRolesSQLGrants(t *testing.T) {
	want, _ := sqlGrants(t, filepath.Join(root, "sql", "roles.sql"))
	got, _ := sqlGrants(t, "compose/relay-role.sql")
	if len(want) == 0 {
		t.Fatal("sql/roles.sql: no GRANT found")
	}
	for g := range want {
		if !got[g] {
			t.Errorf("deploy/compose/relay-role.sql lacks %q of sql/roles.sql", g)
		}
	}
	for g := range got {
		if !want[g] {
			t.Errorf("deploy/compose/relay-role.sql grants %q, which sql/roles.sql does not", g)
		}
	}
	b, err := os.ReadFile("compose/relay-role.sql")
	if err != nil {
		t.Fatal(err)
	}
	if role := relayRole(t); !strings.Contains(string(b), "CREATE ROLE "+role+" WITH LOGIN REPLICATION") {
		t.Errorf("deploy/compose/relay-role.sql does not create %s WITH LOGIN REPLICATION", role)
	}
	c := loadCompose(t)
	mounted := false
	for _, v := range c.strings("relay-role", "volumes") {
		mounted = mounted || strings.HasPrefix(v, "./deploy/compose/relay-role.sql:")
	}
	// The password the role gets is the one cdc run logs in with.
	var pw string
	for _, a := range c.strings("relay-role", "command") {
		if v, ok := strings.CutPrefix(a, "relay_password="); ok {
			pw = v
		}
	}
	if got := c.env(t, "cdc")["PGPASSWORD"]; pw == "" || got != pw {
		t.Errorf("service relay-role sets the password %q, service cdc logs in with %q", pw, got)
	}
	if !mounted || !slices.Contains(c.strings("relay-role", "command"), "-f") {
		t.Errorf("service relay-role does not run deploy/compose/relay-role.sql (volumes %v, command %v)",
			c.strings("relay-role", "volumes"), c.strings("relay-role", "command"))
	}
}
