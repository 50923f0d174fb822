package deploy

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/walpost/walpost/internal/config"
)

// scheme holds the API types the manifests may use. An object of a kind
// not registered here fails the test: register its group rather than let
// it pass unchecked.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, batchv1.AddToScheme, policyv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}()

// strictDecoder decodes YAML into the registered API types as the API
// server's strict field validation (kubectl apply --validate=strict) does:
// an unknown field, a duplicate field or a field in the wrong case is an
// error, and so is a value of the wrong type.
var strictDecoder = kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme, scheme,
	kjson.SerializerOptions{Yaml: true, Strict: true})

// decodeStrict decodes one Kubernetes object from YAML into its API type.
func decodeStrict(what string, y []byte) (runtime.Object, error) {
	obj, gvk, err := strictDecoder.Decode(y, nil, nil)
	switch {
	case runtime.IsNotRegisteredError(err):
		return nil, fmt.Errorf("%s: %v: this test does not know the kind; add its API group to scheme", what, err)
	case err != nil:
		return nil, fmt.Errorf("%s (%v) does not decode strictly into its API type: %v", what, gvk, err)
	}
	return obj, nil
}

// kustomize renders a kustomization directory with kustomize's own
// library, as `kubectl apply -k` (kubectl kustomize) does: in-process,
// from the files alone (no plugins, no remote bases), and decodes every
// object it outputs strictly into its API type.
func kustomize(t *testing.T, dir string) []runtime.Object {
	t.Helper()
	objs, err := render(dir)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func render(dir string) ([]runtime.Object, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %v", dir, err)
	}
	var objs []runtime.Object
	var errs []string
	for _, r := range m.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			return nil, fmt.Errorf("kustomize build %s: %s: %v", dir, r.CurId(), err)
		}
		o, err := decodeStrict(fmt.Sprintf("kustomize build %s: %s %s", dir, r.GetKind(), r.GetName()), y)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		objs = append(objs, o)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	if len(objs) == 0 {
		return nil, fmt.Errorf("kustomize build %s: no objects", dir)
	}
	return objs, nil
}

// ofType returns the objects of type T.
func ofType[T runtime.Object](objs []runtime.Object) []T {
	var out []T
	for _, o := range objs {
		if x, ok := o.(T); ok {
			out = append(out, x)
		}
	}
	return out
}

// kustomizations returns every directory under deploy/kubernetes that
// holds a kustomization.
func kustomizations(t *testing.T) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir("kubernetes", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && d.Name() == "kustomization.yaml" {
			dirs = append(dirs, filepath.Dir(p))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) < 3 {
		t.Fatalf("found only the kustomizations %v under deploy/kubernetes", dirs)
	}
	return dirs
}

// TestKubernetesManifestsDecodeStrictlyIntoTheirAPITypes: every
// kustomization under deploy/kubernetes renders with kustomize, and each
// object it outputs, and the example Secret, decodes into its k8s.io/api
// type with unknown fields refused. A mis-indented key (one that lands in
// the parent mapping) is an unknown field there; one that leaves a mapping
// empty is caught by the checks of each workload below.
func TestKubernetesManifestsDecodeStrictlyIntoTheirAPITypes(t *testing.T) {
	for _, dir := range kustomizations(t) {
		objs, err := render(dir)
		if err != nil {
			t.Error(err)
			continue
		}
		for _, o := range objs {
			m, ok := o.(metav1.Object)
			if !ok || m.GetName() == "" {
				t.Errorf("kustomize build %s: an object without a name: %v", dir, o.GetObjectKind().GroupVersionKind())
			}
		}
	}
	if _, err := exampleSecret(); err != nil {
		t.Error(err)
	}
}

// exampleSecret is deploy/kubernetes/secret.example.yaml, decoded
// strictly: its name and keys are what the pods' references must name.
func exampleSecret() (*corev1.Secret, error) {
	b, err := os.ReadFile("kubernetes/secret.example.yaml")
	if err != nil {
		return nil, err
	}
	o, err := decodeStrict("secret.example.yaml", b)
	if err != nil {
		return nil, err
	}
	s, ok := o.(*corev1.Secret)
	if !ok {
		return nil, fmt.Errorf("secret.example.yaml: a %T, want a Secret", o)
	}
	return s, nil
}

// secretKeys returns the keys of a Secret, from data or stringData.
func secretKeys(s *corev1.Secret) map[string]string {
	out := map[string]string{}
	for k, v := range s.Data {
		out[k] = string(v)
	}
	for k, v := range s.StringData {
		out[k] = v
	}
	return out
}

// checkedPod is what checkPod found in a workload.
type checkedPod struct {
	c   corev1.Container // the cdc container
	cfg *config.Config
	env map[string]string
}

// checkPod checks what every workload running cdc needs: references that
// resolve (volumes, the ConfigMap and its key, the Secret and its keys),
// the security context, resources. It loads the config its container
// reads, with the env it gets.
func checkPod(t *testing.T, what string, tpl corev1.PodTemplateSpec, objs []runtime.Object, wantCmd string) checkedPod {
	t.Helper()
	spec := tpl.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("%s: %d containers, want 1", what, len(spec.Containers))
	}
	c := spec.Containers[0]
	if len(c.Args) == 0 || c.Args[0] != wantCmd {
		t.Errorf("%s: args %q, want cdc %s", what, c.Args, wantCmd)
	}
	if cdcArgsError := cdcFlagsError(t, c.Args); cdcArgsError != "" {
		t.Errorf("%s: cdc refuses the args %q: %s", what, c.Args, cdcArgsError)
	}
	cfgPath := configFlag(c.Args)
	if cfgPath == "" {
		t.Fatalf("%s: args %q name no --config", what, c.Args)
	}

	secret, err := exampleSecret()
	if err != nil {
		t.Fatal(err)
	}
	keys := secretKeys(secret)
	configMaps := map[string]*corev1.ConfigMap{}
	for _, cm := range ofType[*corev1.ConfigMap](objs) {
		configMaps[cm.Name] = cm
	}

	// Every volume resolves: a ConfigMap of this kustomization with the
	// keys its items name, or the example Secret.
	volumes := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
		switch {
		case v.ConfigMap != nil:
			cm := configMaps[v.ConfigMap.Name]
			if cm == nil {
				t.Errorf("%s: volume %s: ConfigMap %s is not in the kustomization", what, v.Name, v.ConfigMap.Name)
				continue
			}
			for _, it := range v.ConfigMap.Items {
				if _, ok := cm.Data[it.Key]; !ok {
					t.Errorf("%s: volume %s: ConfigMap %s has no key %s", what, v.Name, cm.Name, it.Key)
				}
			}
		case v.Secret != nil:
			if v.Secret.SecretName != secret.Name {
				t.Errorf("%s: volume %s: Secret %s is not the example Secret %s", what, v.Name, v.Secret.SecretName, secret.Name)
			}
		default:
			t.Errorf("%s: volume %s: neither a ConfigMap nor a Secret; teach this test", what, v.Name)
		}
	}
	for _, m := range c.VolumeMounts {
		if _, ok := volumes[m.Name]; !ok {
			t.Errorf("%s: volumeMount %s names no volume of the pod", what, m.Name)
		}
	}

	// The config file: a volumeMount above it, from a ConfigMap key.
	var mount *corev1.VolumeMount
	for i, m := range c.VolumeMounts {
		if strings.HasPrefix(cfgPath, strings.TrimSuffix(m.MountPath, "/")+"/") {
			mount = &c.VolumeMounts[i]
		}
	}
	if mount == nil {
		t.Fatalf("%s: no volumeMount holds --config %s", what, cfgPath)
	}
	rel := strings.TrimPrefix(cfgPath, strings.TrimSuffix(mount.MountPath, "/")+"/")
	v := volumes[mount.Name]
	if v.ConfigMap == nil {
		t.Fatalf("%s: volume %s (holding --config %s) is no ConfigMap", what, mount.Name, cfgPath)
	}
	key := rel
	if v.ConfigMap.Items != nil {
		key = ""
		for _, it := range v.ConfigMap.Items {
			if it.Path == rel {
				key = it.Key
			}
		}
	}
	cm := configMaps[v.ConfigMap.Name]
	if cm == nil || key == "" || cm.Data[key] == "" {
		t.Fatalf("%s: ConfigMap %s has no key giving %s", what, v.ConfigMap.Name, cfgPath)
	}

	// The env: literal values, and secretKeyRefs to the example Secret's keys.
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			val, ok := keys[ref.Key]
			if ref.Name != secret.Name || !ok {
				t.Errorf("%s: env %s: secretKeyRef %s/%s is not a key of Secret %s (secret.example.yaml)", what, e.Name, ref.Name, ref.Key, secret.Name)
			}
			env[e.Name] = val
		default:
			t.Errorf("%s: env %s: neither value nor secretKeyRef; teach this test", what, e.Name)
		}
	}
	if len(c.EnvFrom) > 0 {
		t.Errorf("%s: envFrom: teach this test", what)
	}
	cfg := loadConfig(t, what+" (ConfigMap "+cm.Name+", key "+key+")", []byte(cm.Data[key]), env)

	// Security: non-root (the Dockerfile's uid), nothing writable, no
	// capabilities, no privilege escalation.
	pod := spec.SecurityContext
	sc := c.SecurityContext
	if pod == nil || sc == nil {
		t.Fatalf("%s: no pod or container securityContext", what)
	}
	if !isTrue(pod.RunAsNonRoot) && !isTrue(sc.RunAsNonRoot) {
		t.Errorf("%s: runAsNonRoot is not true", what)
	}
	uid, _, _ := strings.Cut(parseDockerfile(t).runtime().user, ":")
	if pod.RunAsUser == nil || strconv.FormatInt(*pod.RunAsUser, 10) != uid {
		t.Errorf("%s: runAsUser %v, want the Dockerfile's USER %s", what, pod.RunAsUser, uid)
	}
	if !isTrue(sc.ReadOnlyRootFilesystem) || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("%s: securityContext: want readOnlyRootFilesystem: true, allowPrivilegeEscalation: false", what)
	}
	if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		t.Errorf("%s: capabilities.drop lacks ALL", what)
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Errorf("%s: automountServiceAccountToken is not false (cdc does not talk to the API server)", what)
	}
	if c.Resources.Limits.Memory().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Errorf("%s: no memory request and limit", what)
	}
	return checkedPod{c: c, cfg: cfg, env: env}
}

func isTrue(b *bool) bool { return b != nil && *b }

// bytesOf parses a GOMEMLIMIT (200MiB).
func bytesOf(t *testing.T, s string) int64 {
	t.Helper()
	m := regexp.MustCompile(`^(\d+)(KiB|MiB|GiB|B)?$`).FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("%q: not a byte quantity this test reads", s)
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	shift := map[string]uint{"": 0, "B": 0, "KiB": 10, "MiB": 20, "GiB": 30}[m[2]]
	return n << shift
}

// portOf resolves a probe's port (a number or a container port's name);
// -1 for a name no container port has.
func portOf(c corev1.Container, p intstr.IntOrString) int {
	if p.Type == intstr.Int {
		return p.IntValue()
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort)
		}
	}
	return -1
}

// checkSelects checks that sel is a valid, non-empty selector that
// matches set.
func checkSelects(t *testing.T, what string, sel *metav1.LabelSelector, set map[string]string) {
	t.Helper()
	if sel == nil || len(sel.MatchLabels) == 0 && len(sel.MatchExpressions) == 0 {
		t.Errorf("%s: selector %v is empty (it would select every pod, or none)", what, sel)
		return
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Errorf("%s: selector: %v", what, err)
		return
	}
	if !s.Matches(labels.Set(set)) {
		t.Errorf("%s: selector %s does not match the pod labels %v", what, s, set)
	}
}

func TestKubernetesRelayDeployment(t *testing.T) {
	objs := kustomize(t, "kubernetes")
	ds := ofType[*appsv1.Deployment](objs)
	if len(ds) != 1 {
		t.Fatalf("deploy/kubernetes: %d Deployments, want 1", len(ds))
	}
	d := ds[0]
	const what = "deploy/kubernetes Deployment"
	p := checkPod(t, what, d.Spec.Template, objs, "run")
	c, cfg := p.c, p.cfg
	podLabels := d.Spec.Template.Labels

	// The API server refuses a Deployment whose selector does not match
	// its template.
	checkSelects(t, what+" spec.selector", d.Spec.Selector, podLabels)

	// One streams, one waits for the slot.
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("%s: replicas %v, want 2 (one streams, one hot standby)", what, d.Spec.Replicas)
	}
	if role := relayRole(t); p.env["PGUSER"] != role {
		t.Errorf("%s: PGUSER %q, want %s (sql/roles.sql)", what, p.env["PGUSER"], role)
	}
	// The standby is only worth having on another node: the anti-affinity
	// term selects the relay's own pods, per node.
	aa := d.Spec.Template.Spec.Affinity
	if aa == nil || aa.PodAntiAffinity == nil || len(aa.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution)+len(aa.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) == 0 {
		t.Errorf("%s: no podAntiAffinity: both pods may land on one node", what)
	} else {
		terms := aa.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution
		for _, w := range aa.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
			terms = append(terms, w.PodAffinityTerm)
		}
		for i, term := range terms {
			checkSelects(t, fmt.Sprintf("%s podAntiAffinity term %d labelSelector", what, i), term.LabelSelector, podLabels)
			if term.TopologyKey != "kubernetes.io/hostname" {
				t.Errorf("%s: podAntiAffinity term %d: topologyKey %q, want kubernetes.io/hostname", what, i, term.TopologyKey)
			}
		}
	}
	// Only the slot's holder is ever Ready, and a new pod cannot take the
	// slot from an old one: a rollout that keeps any old pod until a new
	// one is Ready never ends.
	ru := d.Spec.Strategy.RollingUpdate
	if ru == nil || ru.MaxUnavailable == nil || ru.MaxUnavailable.String() != "100%" && ru.MaxUnavailable.String() != "2" {
		t.Errorf("%s: strategy maxUnavailable: a rollout would wait forever for a new pod to be Ready while an old one holds the slot; want 100%%", what)
	}

	// Probes and metrics on http.listen's port, reachable from the kubelet.
	port := listenPort(t, cfg)
	if h, _, _ := strings.Cut(cfg.HTTP.Listen, ":"); h != "0.0.0.0" && h != "" {
		t.Errorf("%s: http.listen %q: the kubelet probes the pod's IP; listen on 0.0.0.0", what, cfg.HTTP.Listen)
	}
	for name, pr := range map[string]*corev1.Probe{"livenessProbe": c.LivenessProbe, "readinessProbe": c.ReadinessProbe} {
		want := map[string]string{"livenessProbe": "/healthz", "readinessProbe": "/readyz"}[name]
		if pr == nil || pr.HTTPGet == nil {
			t.Errorf("%s: no %s httpGet", what, name)
			continue
		}
		if pr.HTTPGet.Path != want {
			t.Errorf("%s: %s path %q, want %s", what, name, pr.HTTPGet.Path, want)
		}
		if got := portOf(c, pr.HTTPGet.Port); got != port {
			t.Errorf("%s: %s port %s (%d), want http.listen's %d", what, name, pr.HTTPGet.Port.String(), got, port)
		}
	}
	ann := d.Spec.Template.Annotations
	if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/port"] != strconv.Itoa(port) || ann["prometheus.io/path"] != "/metrics" {
		t.Errorf("%s: prometheus.io annotations %v, want scrape true, port %d, path /metrics", what, ann, port)
	}

	// Time to drain before SIGKILL.
	grace := d.Spec.Template.Spec.TerminationGracePeriodSeconds
	if grace == nil || float64(*grace) <= cfg.Relay.ShutdownTimeout.D().Seconds() {
		t.Errorf("%s: terminationGracePeriodSeconds %v is not above relay.shutdown_timeout %s", what, grace, cfg.Relay.ShutdownTimeout.D())
	}

	// Memory: the limit holds what is in flight with Go's headroom (the
	// rule deployment.yaml states), and GOMEMLIMIT sits below the limit.
	limit := c.Resources.Limits.Memory().Value()
	if min := 4*cfg.Relay.WindowBytes + 64<<20; limit < min {
		t.Errorf("%s: memory limit %d B is under 4 x relay.window_bytes + 64 MiB = %d B", what, limit, min)
	}
	if gml, ok := p.env["GOMEMLIMIT"]; !ok || bytesOf(t, gml) >= limit {
		t.Errorf("%s: GOMEMLIMIT %q, want one below the memory limit %d B", what, gml, limit)
	}

	// Nothing routes to the relay by readiness, and no disruption budget
	// counts Ready pods of it (only one ever is).
	for _, s := range ofType[*corev1.Service](objs) {
		if len(s.Spec.Selector) > 0 && labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(podLabels)) && !s.Spec.PublishNotReadyAddresses {
			t.Errorf("Service %s selects the relay's pods but leaves the NotReady standby out", s.Name)
		}
	}
	for _, b := range ofType[*policyv1.PodDisruptionBudget](objs) {
		if sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector); err == nil && !sel.Empty() && sel.Matches(labels.Set(podLabels)) {
			t.Errorf("PodDisruptionBudget %s counts the relay's Ready pods, of which only one ever is: it would block node drains", b.Name)
		}
	}
}

func TestKubernetesInitJob(t *testing.T) {
	objs := kustomize(t, "kubernetes/init")
	js := ofType[*batchv1.Job](objs)
	if len(js) != 1 {
		t.Fatalf("deploy/kubernetes/init: %d Jobs, want 1", len(js))
	}
	const what = "deploy/kubernetes/init Job"
	j := js[0]
	p := checkPod(t, what, j.Spec.Template, objs, "init")
	if role := relayRole(t); p.env["PGUSER"] == role {
		t.Errorf("%s: runs cdc init as %s, the relay role, which may not create the publication, slot and tables", what, role)
	}
	if rp := j.Spec.Template.Spec.RestartPolicy; rp != corev1.RestartPolicyNever && rp != corev1.RestartPolicyOnFailure {
		t.Errorf("%s: restartPolicy %q", what, rp)
	}
	// The Job and the relay read the same config, in the same namespace.
	relay := kustomize(t, "kubernetes")
	cms := func(objs []runtime.Object) string { return fmt.Sprint(ofType[*corev1.ConfigMap](objs)) }
	if cms(objs) != cms(relay) {
		t.Errorf("%s and the relay do not mount the same ConfigMaps", what)
	}
	ns := func(objs []runtime.Object) string { return objs[0].(metav1.Object).GetNamespace() }
	if ns(objs) == "" || ns(objs) != ns(relay) {
		t.Errorf("%s: namespace %q, the relay's %q", what, ns(objs), ns(relay))
	}
}
