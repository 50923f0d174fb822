package deploy

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/walpost/walpost/internal/config"
)

// kustomize builds a kustomization the way `kubectl apply -k` does, for
// the few features these manifests use (resources: files and directories,
// configMapGenerator from files, namespace, images), and refuses any other
// kustomization field rather than ignore it. Generated names are kept
// without kustomize's hash suffix: kustomize rewrites the references it
// knows (a volume's configMap.name among them) to the suffixed name, so a
// reference that matches here matches there.
func kustomize(t *testing.T, dir string) []map[string]any {
	t.Helper()
	k := yamlDoc(t, filepath.Join(dir, "kustomization.yaml"))
	var objs []map[string]any
	for key, v := range k {
		switch key {
		case "apiVersion", "kind":
		case "resources":
			for _, r := range list(v) {
				p := filepath.Join(dir, str(r))
				if fi, err := os.Stat(p); err == nil && fi.IsDir() {
					objs = append(objs, kustomize(t, p)...)
				} else {
					objs = append(objs, yamlDocs(t, p)...)
				}
			}
		case "configMapGenerator":
			for _, g := range list(v) {
				data := map[string]any{}
				for _, f := range list(dig(g, "files")) {
					key, file, ok := strings.Cut(str(f), "=")
					if !ok {
						key, file = path.Base(key), key
					}
					b, err := os.ReadFile(filepath.Join(dir, file))
					if err != nil {
						t.Fatalf("%s: configMapGenerator: %v", dir, err)
					}
					data[key] = string(b)
				}
				objs = append(objs, map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
					"metadata": map[string]any{"name": str(dig(g, "name"))}, "data": data})
			}
		case "namespace", "images":
			// applied below, after the resources
		default:
			t.Fatalf("%s/kustomization.yaml: field %q is not understood by this test's kustomize; teach it", dir, key)
		}
	}
	if ns := str(k["namespace"]); ns != "" {
		for _, o := range objs {
			obj(o["metadata"])["namespace"] = ns
		}
	}
	for _, img := range list(k["images"]) {
		found := false
		for _, o := range objs {
			for _, c := range containers(o) {
				if name, _, _ := strings.Cut(str(c["image"]), ":"); name == str(dig(img, "name")) {
					c["image"] = name + ":" + str(dig(img, "newTag"))
					found = true
				}
			}
		}
		if !found {
			t.Errorf("%s/kustomization.yaml: images: %v matches no container image", dir, dig(img, "name"))
		}
	}
	return objs
}

func podSpec(o map[string]any) map[string]any { return obj(dig(o, "spec", "template", "spec")) }

func containers(o map[string]any) []map[string]any {
	var out []map[string]any
	for _, c := range list(podSpec(o)["containers"]) {
		out = append(out, obj(c))
	}
	return out
}

func find(objs []map[string]any, kind string) []map[string]any {
	var out []map[string]any
	for _, o := range objs {
		if o["kind"] == kind {
			out = append(out, o)
		}
	}
	return out
}

// exampleSecret is deploy/kubernetes/secret.example.yaml: its name and keys
// are what the pods' secretKeyRefs must name.
func exampleSecret(t *testing.T) (name string, data map[string]string) {
	t.Helper()
	s := yamlDoc(t, "kubernetes/secret.example.yaml")
	if s["kind"] != "Secret" {
		t.Fatalf("secret.example.yaml: kind %v", s["kind"])
	}
	data = map[string]string{}
	for k, v := range obj(s["stringData"]) {
		data[k] = str(v)
	}
	return str(dig(s, "metadata", "name")), data
}

// checkedPod is what checkPod found in a workload.
type checkedPod struct {
	c   map[string]any // the cdc container
	cfg *config.Config
	env map[string]string
}

// checkPod checks what every workload running cdc needs and loads the
// config its container reads, with the env it gets.
func checkPod(t *testing.T, what string, o map[string]any, objs []map[string]any, wantCmd string) checkedPod {
	t.Helper()
	cs := containers(o)
	if len(cs) != 1 {
		t.Fatalf("%s: %d containers, want 1", what, len(cs))
	}
	c := cs[0]
	var args []string
	for _, a := range list(c["args"]) {
		args = append(args, str(a))
	}
	if len(args) == 0 || args[0] != wantCmd {
		t.Errorf("%s: args %q, want cdc %s", what, args, wantCmd)
	}
	cfgPath := configFlag(args)
	if cfgPath == "" {
		t.Fatalf("%s: args %q name no --config", what, args)
	}

	// The config file: a volumeMount above it, from a ConfigMap of this
	// kustomization that holds the key.
	var mount map[string]any
	for _, m := range list(c["volumeMounts"]) {
		if mp := str(dig(m, "mountPath")); strings.HasPrefix(cfgPath, strings.TrimSuffix(mp, "/")+"/") {
			mount = obj(m)
		}
	}
	if mount == nil {
		t.Fatalf("%s: no volumeMount holds --config %s", what, cfgPath)
	}
	rel := strings.TrimPrefix(cfgPath, strings.TrimSuffix(str(mount["mountPath"]), "/")+"/")
	var cmName, key string
	for _, v := range list(podSpec(o)["volumes"]) {
		if str(dig(v, "name")) != str(mount["name"]) {
			continue
		}
		cmName, key = str(dig(v, "configMap", "name")), rel
		if items := list(dig(v, "configMap", "items")); items != nil {
			key = ""
			for _, it := range items {
				if str(dig(it, "path")) == rel {
					key = str(dig(it, "key"))
				}
			}
		}
	}
	if cmName == "" || key == "" {
		t.Fatalf("%s: volume %v is no ConfigMap with a key at %s", what, mount["name"], rel)
	}
	var data string
	for _, cm := range find(objs, "ConfigMap") {
		if str(dig(cm, "metadata", "name")) == cmName {
			data = str(dig(cm, "data", key))
		}
	}
	if data == "" {
		t.Fatalf("%s: ConfigMap %s with key %s is not in the kustomization", what, cmName, key)
	}

	// The env: literal values, and secretKeyRefs to the example Secret's keys.
	secret, secretData := exampleSecret(t)
	env := map[string]string{}
	for _, e := range list(c["env"]) {
		name := str(dig(e, "name"))
		switch {
		case dig(e, "value") != nil:
			env[name] = str(dig(e, "value"))
		case dig(e, "valueFrom", "secretKeyRef") != nil:
			ref := dig(e, "valueFrom", "secretKeyRef")
			v, ok := secretData[str(dig(ref, "key"))]
			if str(dig(ref, "name")) != secret || !ok {
				t.Errorf("%s: env %s: secretKeyRef %v is not a key of Secret %s (secret.example.yaml)", what, name, ref, secret)
			}
			env[name] = v
		default:
			t.Errorf("%s: env %s: neither value nor secretKeyRef; teach this test", what, name)
		}
	}
	cfg := loadConfig(t, what+" (ConfigMap "+cmName+", key "+key+")", []byte(data), env)

	// Security: non-root (the Dockerfile's uid), nothing writable, no
	// capabilities, no privilege escalation.
	pod := obj(podSpec(o)["securityContext"])
	sc := obj(c["securityContext"])
	if pod["runAsNonRoot"] != true && sc["runAsNonRoot"] != true {
		t.Errorf("%s: runAsNonRoot is not true", what)
	}
	uid, _, _ := strings.Cut(parseDockerfile(t).runtime().user, ":")
	if got := str(pod["runAsUser"]); got != uid {
		t.Errorf("%s: runAsUser %q, want the Dockerfile's USER %s", what, got, uid)
	}
	if sc["readOnlyRootFilesystem"] != true || sc["allowPrivilegeEscalation"] != false {
		t.Errorf("%s: securityContext %v: want readOnlyRootFilesystem: true, allowPrivilegeEscalation: false", what, sc)
	}
	if !slices.Contains(list(dig(sc, "capabilities", "drop")), any("ALL")) {
		t.Errorf("%s: capabilities.drop %v lacks ALL", what, dig(sc, "capabilities", "drop"))
	}
	if podSpec(o)["automountServiceAccountToken"] != false {
		t.Errorf("%s: automountServiceAccountToken is not false (cdc does not talk to the API server)", what)
	}
	if dig(c, "resources", "limits", "memory") == nil || dig(c, "resources", "requests", "memory") == nil {
		t.Errorf("%s: no memory request and limit", what)
	}
	return checkedPod{c: c, cfg: cfg, env: env}
}

// bytesOf parses a Kubernetes quantity (256Mi) or a GOMEMLIMIT (200MiB).
func bytesOf(t *testing.T, s string) int64 {
	t.Helper()
	m := regexp.MustCompile(`^(\d+)(Ki|Mi|Gi|KiB|MiB|GiB|B)?$`).FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("%q: not a byte quantity this test reads", s)
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	shift := map[string]uint{"": 0, "B": 0, "Ki": 10, "KiB": 10, "Mi": 20, "MiB": 20, "Gi": 30, "GiB": 30}[m[2]]
	return n << shift
}

// portOf resolves a probe's port (a number or a container port's name).
func portOf(c map[string]any, p any) string {
	for _, cp := range list(c["ports"]) {
		if str(dig(cp, "name")) == str(p) {
			return str(dig(cp, "containerPort"))
		}
	}
	return str(p)
}

func TestKubernetesRelayDeployment(t *testing.T) {
	objs := kustomize(t, "kubernetes")
	ds := find(objs, "Deployment")
	if len(ds) != 1 {
		t.Fatalf("deploy/kubernetes: %d Deployments, want 1", len(ds))
	}
	d := ds[0]
	const what = "deploy/kubernetes Deployment"
	p := checkPod(t, what, d, objs, "run")
	c, cfg := p.c, p.cfg

	// One streams, one waits for the slot.
	if r := str(dig(d, "spec", "replicas")); r != "2" {
		t.Errorf("%s: replicas %s, want 2 (one streams, one hot standby)", what, r)
	}
	if role := relayRole(t); p.env["PGUSER"] != role {
		t.Errorf("%s: PGUSER %q, want %s (sql/roles.sql)", what, p.env["PGUSER"], role)
	}
	// Only the slot's holder is ever Ready, and a new pod cannot take the
	// slot from an old one: a rollout that keeps any old pod until a new
	// one is Ready never ends.
	if mu := str(dig(d, "spec", "strategy", "rollingUpdate", "maxUnavailable")); mu != "100%" && mu != "2" {
		t.Errorf("%s: strategy maxUnavailable %q: a rollout would wait forever for a new pod to be Ready while an old one holds the slot; want 100%%", what, mu)
	}

	// Probes and metrics on http.listen's port, reachable from the kubelet.
	port := strconv.Itoa(listenPort(t, cfg))
	if h, _, _ := strings.Cut(cfg.HTTP.Listen, ":"); h != "0.0.0.0" && h != "" {
		t.Errorf("%s: http.listen %q: the kubelet probes the pod's IP; listen on 0.0.0.0", what, cfg.HTTP.Listen)
	}
	for probe, want := range map[string]string{"livenessProbe": "/healthz", "readinessProbe": "/readyz"} {
		if got := str(dig(c, probe, "httpGet", "path")); got != want {
			t.Errorf("%s: %s path %q, want %s", what, probe, got, want)
		}
		if got := portOf(c, dig(c, probe, "httpGet", "port")); got != port {
			t.Errorf("%s: %s port %s, want http.listen's %s", what, probe, got, port)
		}
	}
	ann := obj(dig(d, "spec", "template", "metadata", "annotations"))
	if str(ann["prometheus.io/scrape"]) != "true" || str(ann["prometheus.io/port"]) != port || str(ann["prometheus.io/path"]) != "/metrics" {
		t.Errorf("%s: prometheus.io annotations %v, want scrape true, port %s, path /metrics", what, ann, port)
	}

	// Time to drain before SIGKILL.
	grace, _ := strconv.Atoi(str(dig(d, "spec", "template", "spec", "terminationGracePeriodSeconds")))
	if float64(grace) <= cfg.Relay.ShutdownTimeout.D().Seconds() {
		t.Errorf("%s: terminationGracePeriodSeconds %d is not above relay.shutdown_timeout %s", what, grace, cfg.Relay.ShutdownTimeout.D())
	}

	// Memory: the limit holds what is in flight with Go's headroom (the
	// rule deployment.yaml states), and GOMEMLIMIT sits below the limit.
	limit := bytesOf(t, str(dig(c, "resources", "limits", "memory")))
	if min := 4*cfg.Relay.WindowBytes + 64<<20; limit < min {
		t.Errorf("%s: memory limit %d B is under 4 x relay.window_bytes + 64 MiB = %d B", what, limit, min)
	}
	if gml, ok := p.env["GOMEMLIMIT"]; !ok || bytesOf(t, gml) >= limit {
		t.Errorf("%s: GOMEMLIMIT %q, want one below the memory limit %d B", what, gml, limit)
	}

	// Nothing routes to the relay by readiness, and no disruption budget
	// counts Ready pods of it (only one ever is).
	labels := obj(dig(d, "spec", "template", "metadata", "labels"))
	selects := func(sel map[string]any) bool {
		for k, v := range sel {
			if str(labels[k]) != str(v) {
				return false
			}
		}
		return len(sel) > 0
	}
	for _, s := range find(objs, "Service") {
		if selects(obj(dig(s, "spec", "selector"))) && dig(s, "spec", "publishNotReadyAddresses") != true {
			t.Errorf("Service %v selects the relay's pods but leaves the NotReady standby out", dig(s, "metadata", "name"))
		}
	}
	for _, b := range find(objs, "PodDisruptionBudget") {
		if selects(obj(dig(b, "spec", "selector", "matchLabels"))) {
			t.Errorf("PodDisruptionBudget %v counts the relay's Ready pods, of which only one ever is: it would block node drains", dig(b, "metadata", "name"))
		}
	}
}

func TestKubernetesInitJob(t *testing.T) {
	objs := kustomize(t, "kubernetes/init")
	js := find(objs, "Job")
	if len(js) != 1 {
		t.Fatalf("deploy/kubernetes/init: %d Jobs, want 1", len(js))
	}
	const what = "deploy/kubernetes/init Job"
	p := checkPod(t, what, js[0], objs, "init")
	if role := relayRole(t); p.env["PGUSER"] == role {
		t.Errorf("%s: runs cdc init as %s, the relay role, which may not create the publication, slot and tables", what, role)
	}
	if rp := str(dig(js[0], "spec", "template", "spec", "restartPolicy")); rp != "Never" && rp != "OnFailure" {
		t.Errorf("%s: restartPolicy %q", what, rp)
	}
	// The Job and the relay read the same config.
	relay := kustomize(t, "kubernetes")
	cm := func(objs []map[string]any) string {
		return fmt.Sprint(find(objs, "ConfigMap"))
	}
	if cm(objs) != cm(relay) {
		t.Errorf("%s and the relay do not mount the same ConfigMaps", what)
	}
	ns := func(objs []map[string]any) string { return str(dig(objs[0], "metadata", "namespace")) }
	if ns(objs) == "" || ns(objs) != ns(relay) {
		t.Errorf("%s: namespace %q, the relay's %q", what, ns(objs), ns(relay))
	}
}
