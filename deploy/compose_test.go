package deploy

import (
	"context"
	"encoding/base64"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
)

// loadCompose loads docker-compose.yml with compose-go, the loader of
// `docker compose` itself: the compose specification's schema (an
// unknown key or a value of the wrong type fails), interpolation,
// normalisation (relative paths resolved, depends_on and ports in their
// long forms) and its consistency checks (depends_on naming a service
// that does not exist fails). The environment is empty and no .env file
// is read, as on a machine with nothing set: ${VAR:-default} takes its
// default.
func loadCompose(t *testing.T) *types.Project {
	t.Helper()
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	p, err := loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  abs,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(abs, "docker-compose.yml")}},
		Environment: types.Mapping{},
	}, func(o *loader.Options) { o.SetProjectName("walpost", true) })
	if err != nil {
		t.Fatalf("docker-compose.yml does not load as docker compose loads it: %v", err)
	}
	if len(p.Services) == 0 {
		t.Fatal("docker-compose.yml: no services")
	}
	return p
}

// service returns the service called name.
func service(t *testing.T, p *types.Project, name string) types.ServiceConfig {
	t.Helper()
	s, ok := p.Services[name]
	if !ok {
		t.Fatalf("docker-compose.yml: no service %s", name)
	}
	return s
}

// envOf returns a service's environment, interpolated.
func envOf(s types.ServiceConfig) map[string]string {
	out := map[string]string{}
	for k, v := range s.Environment {
		if v != nil {
			out[k] = *v
		}
	}
	return out
}

// composeVarRE matches compose's interpolation: ${VAR}, ${VAR:-default},
// ${VAR-default}, ${VAR:?err}.
var composeVarRE = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?+])([^}]*))?\}`)

// TestComposeFileWorksWithNothingSet: every ${VAR} of docker-compose.yml
// has a default, so that `docker compose up` works as checked out (compose
// would replace an unset one by "" with only a warning).
func TestComposeFileWorksWithNothingSet(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range composeVarRE.FindAllStringSubmatch(string(b), -1) {
		if m[2] != "-" && m[2] != ":-" {
			t.Errorf("docker-compose.yml: %s has no default", m[0])
		}
	}
	loadCompose(t)
}

// cdcService is a compose service that runs the walpost image.
type cdcService struct {
	name   string
	args   []string // the arguments after the entrypoint: a cdc command line
	config string   // the host file mounted at configPath
}

// cdcServices returns the services that run the walpost image (built from
// the Dockerfile, or its image walpost/cdc), with the cdc command line
// each runs: its command, else the Dockerfile's CMD, after an entrypoint
// that must be the Dockerfile's (cdc).
func cdcServices(t *testing.T, p *types.Project) []cdcService {
	t.Helper()
	df := parseDockerfile(t)
	var out []cdcService
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range p.Services {
			if !yield(n) {
				return
			}
		}
	}) {
		s := p.Services[name]
		image, _, _ := strings.Cut(s.Image, ":")
		if s.Build == nil && image != "walpost/cdc" {
			continue
		}
		if s.Build != nil && (s.Build.Dockerfile != "" && s.Build.Dockerfile != "Dockerfile" || filepath.Clean(s.Build.Context) != filepath.Clean(p.WorkingDir)) {
			t.Errorf("service %s builds %s/%s, not the repository's Dockerfile", name, s.Build.Context, s.Build.Dockerfile)
		}
		if s.Entrypoint != nil && !slices.Equal(s.Entrypoint, df.runtime().entrypoint) {
			t.Errorf("service %s: entrypoint %q, want the image's %q (cdc)", name, s.Entrypoint, df.runtime().entrypoint)
		}
		args := []string(s.Command)
		if args == nil {
			args = df.runtime().cmd
		}
		var host string
		for _, v := range s.Volumes {
			if v.Target == configPath {
				host = v.Source
				if !filepath.IsAbs(host) {
					host = filepath.Join(p.WorkingDir, host)
				}
				if !v.ReadOnly {
					t.Errorf("service %s: the config at %s is mounted writable", name, configPath)
				}
			}
		}
		if host == "" {
			t.Errorf("service %s runs the walpost image but mounts no config at %s", name, configPath)
			continue
		}
		out = append(out, cdcService{name: name, args: args, config: host})
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

// flagValue returns the value of --name in args, and whether it is there.
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if a == "--"+name && i+1 < len(args) {
			return args[i+1], true
		}
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// TestComposeCdcCommandsAreOnesCdcAccepts: each service that runs the
// walpost image runs a command line the real cdc binary parses (the
// command exists, every flag is defined and its value valid), so that a
// renamed or mistyped flag fails here and not at `docker compose up`.
func TestComposeCdcCommandsAreOnesCdcAccepts(t *testing.T) {
	p := loadCompose(t)
	services := cdcServices(t, p)
	var commands []string
	for _, s := range services {
		commands = append(commands, s.args[0])
		if e := cdcFlagsError(t, s.args); e != "" {
			t.Errorf("docker-compose.yml: service %s runs cdc %q, which cdc refuses: %s", s.name, s.args, e)
		}
	}
	slices.Sort(commands)
	if !slices.Equal(commands, []string{"init", "run"}) {
		t.Errorf("docker-compose.yml: services running the walpost image run %v, want one init and one run", commands)
	}
}

func TestComposeSampleConfigLoadsInEveryServiceThatRunsCdc(t *testing.T) {
	p := loadCompose(t)
	role := relayRole(t)
	for _, svc := range cdcServices(t, p) {
		name := svc.name
		s := p.Services[name]
		if got := configFlag(svc.args); got != configPath {
			t.Errorf("docker-compose.yml: service %s runs %v: --config %q, want the mounted %s", name, svc.args, got, configPath)
		}
		b, err := os.ReadFile(svc.config)
		if err != nil {
			t.Fatal(err)
		}
		env := envOf(s)
		cfg := loadConfig(t, "docker-compose.yml service "+name+" ("+svc.config+")", b, env)

		// Postgres is the compose service the URL names, with logical WAL.
		host := urlHost(t, cfg.Postgres.URL)
		if pg, ok := p.Services[host]; !ok {
			t.Errorf("service %s: postgres.url host %q is not a compose service", name, host)
		} else if !slices.Contains(pg.Command, "wal_level=logical") {
			t.Errorf("service %s: postgres.url names service %s, which does not run with wal_level=logical", name, host)
		}

		// Every Kafka sink reaches the compose broker on its advertised
		// listener and may create topics, as the broker allows.
		for _, sink := range rawSinks(t, b) {
			if sink["kind"] != "kafka" {
				continue
			}
			if sink["auto_create_topics"] != true {
				t.Errorf("%s: sink %v: auto_create_topics is not true (the compose broker starts with no topics)", svc.config, sink["name"])
			}
			for _, br := range list(sink["brokers"]) {
				bhost, _, err := net.SplitHostPort(str(br))
				broker, ok := p.Services[bhost]
				if err != nil || !ok {
					t.Errorf("%s: broker %v is not a compose service's host:port", svc.config, br)
					continue
				}
				kenv := envOf(broker)
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
		port := listenPort(t, cfg)
		published := false
		for _, pp := range s.Ports {
			published = published || int(pp.Target) == port && pp.Published != ""
		}
		if !published {
			t.Errorf("service %s: http.listen port %d is not published (ports %v)", name, port, s.Ports)
		}
		if s.StopGracePeriod == nil {
			t.Errorf("service %s: no stop_grace_period (compose's default 10s is below relay.shutdown_timeout)", name)
		} else if grace := time.Duration(*s.StopGracePeriod); grace <= cfg.Relay.ShutdownTimeout.D() {
			t.Errorf("service %s: stop_grace_period %s is not above relay.shutdown_timeout %s", name, grace, cfg.Relay.ShutdownTimeout.D())
		}
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

// TestComposeStartOrderDoesNotMatter: the services wait for what they
// need (depends_on conditions that can be met, in the order init → role
// → run), and do not depend on that order alone: Postgres' health check
// asks over TCP, and cdc init retries a server that is not listening yet.
//
// The official postgres image runs a temporary server during its first
// start (initdb scripts) that listens on the Unix socket only; pg_isready
// without -h asks that socket and passes early, and a cdc init started
// then finds nothing on TCP. Asked over TCP, the check passes only once
// the real server listens; and cdc init waits (--wait) for it anyway.
func TestComposeStartOrderDoesNotMatter(t *testing.T) {
	p := loadCompose(t)
	for name, s := range p.Services {
		for dep, d := range s.DependsOn {
			target, ok := p.Services[dep]
			if !ok {
				t.Errorf("service %s depends on %s, which does not exist", name, dep)
				continue
			}
			switch d.Condition {
			case types.ServiceConditionHealthy:
				if target.HealthCheck == nil || target.HealthCheck.Disable || len(target.HealthCheck.Test) == 0 {
					t.Errorf("service %s waits for %s to be healthy, which has no healthcheck", name, dep)
				}
			case types.ServiceConditionCompletedSuccessfully:
				if target.Restart != "no" && target.Restart != "" {
					t.Errorf("service %s waits for %s to complete, whose restart is %q (want \"no\")", name, dep, target.Restart)
				}
			default:
				t.Errorf("service %s depends on %s with condition %q: want service_healthy or service_completed_successfully", name, dep, d.Condition)
			}
		}
	}
	// The order the relay needs: Postgres up, cdc init, the relay role
	// (on the tables init made), then cdc run with Kafka healthy.
	want := map[string]map[string]string{
		"cdc-init":   {"postgres": types.ServiceConditionHealthy},
		"relay-role": {"cdc-init": types.ServiceConditionCompletedSuccessfully},
		"cdc":        {"relay-role": types.ServiceConditionCompletedSuccessfully, "kafka": types.ServiceConditionHealthy},
	}
	for name, deps := range want {
		for dep, cnd := range deps {
			if got := service(t, p, name).DependsOn[dep].Condition; got != cnd {
				t.Errorf("service %s: depends_on %s: condition %q, want %q", name, dep, got, cnd)
			}
		}
	}

	// Postgres' health check: pg_isready over TCP to the port the server
	// listens on in the container.
	pg := service(t, p, "postgres")
	hc := pg.HealthCheck
	if hc == nil || len(hc.Test) < 2 || hc.Test[0] != "CMD" || hc.Test[1] != "pg_isready" {
		t.Fatalf("service postgres: healthcheck %v, want [CMD pg_isready -h 127.0.0.1 ...]", hc)
	}
	h, _ := flagValue(hc.Test, "host")
	if v, ok := shortFlag(hc.Test, "-h"); ok {
		h = v
	}
	if ip := net.ParseIP(h); ip == nil || !ip.IsLoopback() {
		t.Errorf("service postgres: healthcheck %q does not ask over TCP (-h 127.0.0.1): without -h pg_isready asks the Unix socket, which the image's temporary initdb server answers before the real one listens on TCP", hc.Test)
	}
	if v, ok := shortFlag(hc.Test, "-p"); ok && v != "5432" {
		t.Errorf("service postgres: healthcheck asks port %s; the server listens on 5432 in the container", v)
	}

	// cdc init waits for the server itself too.
	for _, s := range cdcServices(t, p) {
		if s.args[0] != "init" {
			continue
		}
		w, ok := flagValue(s.args, "wait")
		d, err := time.ParseDuration(w)
		if !ok || err != nil || d < 30*time.Second {
			t.Errorf("service %s: cdc init --wait %q: want an explicit wait of 30s or more for Postgres to listen", s.name, w)
		}
	}

	// A system cluster usually has 5432.
	for _, pp := range pg.Ports {
		if pp.Published == "5432" {
			t.Errorf("service postgres publishes host port 5432, which a system cluster may hold")
		}
	}
	// KRaft formats its storage with CLUSTER_ID: a base64url 16-byte id.
	id := envOf(service(t, p, "kafka"))["CLUSTER_ID"]
	if b, err := base64.RawURLEncoding.Strict().DecodeString(id); err != nil || len(b) != 16 {
		t.Errorf("service kafka: CLUSTER_ID %q is not the base64url of 16 bytes (%v)", id, err)
	}
}

// shortFlag returns the word after flag in args.
func shortFlag(args []string, flag string) (string, bool) {
	if i := slices.Index(args, flag); i >= 0 && i+1 < len(args) {
		return args[i+1], true
	}
	return "", false
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
	p := loadCompose(t)
	rr := service(t, p, "relay-role")
	sqlFile, _ := filepath.Abs("compose/relay-role.sql")
	var mountedAt string
	for _, v := range rr.Volumes {
		if v.Source == sqlFile {
			mountedAt = v.Target
		}
	}
	if f, _ := shortFlag(rr.Command, "-f"); mountedAt == "" || f != mountedAt {
		t.Errorf("service relay-role does not run deploy/compose/relay-role.sql (volumes %v, command %q)", rr.Volumes, rr.Command)
	}
	// The password the role gets is the one cdc run logs in with.
	var pw string
	for _, a := range rr.Command {
		if v, ok := strings.CutPrefix(a, "relay_password="); ok {
			pw = v
		}
	}
	if got := envOf(service(t, p, "cdc"))["PGPASSWORD"]; pw == "" || got != pw {
		t.Errorf("service relay-role sets the password %q, service cdc logs in with %q", pw, got)
	}
	if envOf(rr)["PGHOST"] == "" || p.Services[envOf(rr)["PGHOST"]].Name == "" {
		t.Errorf("service relay-role: PGHOST %q is not a compose service", envOf(rr)["PGHOST"])
	}
}
