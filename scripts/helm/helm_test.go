package helm

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

const (
	chartDir = "../../deploy/helm/floodgate"
	release  = "fg"
	ns       = "limits"
)

// The cases: the default values, and each listener and option on.
var cases = []struct {
	name   string
	values string
	// The objects rendered, by kind/name.
	want []string
	// The listeners the pod serves, by port name.
	ports []string
}{
	{
		name: "default",
		want: []string{"ConfigMap/fg-floodgate", "Deployment/fg-floodgate", "PodDisruptionBudget/fg-floodgate",
			"Secret/fg-floodgate-tokens", "Service/fg-floodgate"},
		ports: []string{"admin", "check", "proxy"},
	},
	{
		name:   "envoy",
		values: "listeners: {envoy: {enabled: true}}",
		want: []string{"ConfigMap/fg-floodgate", "Deployment/fg-floodgate", "PodDisruptionBudget/fg-floodgate",
			"Secret/fg-floodgate-tokens", "Service/fg-floodgate"},
		ports: []string{"admin", "check", "grpc-envoy", "proxy"},
	},
	{
		name: "envoy-only",
		// docs/kubernetes.md's example, with a second rule file.
		values: `
listeners:
  envoy: {enabled: true}
  proxy: {enabled: false}
  check: {enabled: false}
redis:
  enabled: true
  config: {addrs: ["redis-master.cache.svc:6379"]}
envoy:
  config: {response_headers: ietf, descriptors: independent}
  rules:
    - name: edge.yaml
      content: |
        domain: edge
        descriptors:
          - key: remote_address
            rate_limit: {unit: second, requests_per_unit: 10}
    - name: api.yaml
      content: |
        domain: api
        descriptors:
          - key: user
            rate_limit: {unit: minute, requests_per_unit: 100}
`,
		want: []string{"ConfigMap/fg-floodgate", "Deployment/fg-floodgate", "PodDisruptionBudget/fg-floodgate",
			"Secret/fg-floodgate-tokens", "Service/fg-floodgate"},
		ports: []string{"admin", "grpc-envoy"},
	},
	{
		name: "postgres",
		// docs/kubernetes.md's example.
		values: `
listeners:
  postgres: {enabled: true, port: 5432}
  proxy: {enabled: false}
  check: {enabled: false}
postgres:
  upstream: pg-primary.db.svc:5432
  config:
    rate_limit:
      per_user: {rate: 200/s, burst: 400}
      per_ip: {rate: 100/s, burst: 200}
    connections:
      per_user: {rate: 20/s, burst: 50}
`,
		want: []string{"ConfigMap/fg-floodgate", "Deployment/fg-floodgate", "PodDisruptionBudget/fg-floodgate",
			"Secret/fg-floodgate-tokens", "Service/fg-floodgate"},
		ports: []string{"admin", "postgres"},
	},
	{
		name: "redis-secret",
		values: `
replicaCount: 3
redis:
  enabled: true
  config: {addrs: ["redis-master.cache:6379"], db: 2}
  auth: {enabled: true, password: s3cret}
tokens: {check: check-value, admin: admin-value}
`,
		want: []string{"ConfigMap/fg-floodgate", "Deployment/fg-floodgate", "PodDisruptionBudget/fg-floodgate",
			"Secret/fg-floodgate-redis", "Secret/fg-floodgate-tokens", "Service/fg-floodgate"},
		ports: []string{"admin", "check", "proxy"},
	},
	{
		name: "redis-existing-secret",
		values: `
config: {storage: {engine: hybrid, hybrid: {instances: 3}}}
redis:
  enabled: true
  config: {mode: sentinel, master_name: main, addrs: ["sentinel-0:26379", "sentinel-1:26379"]}
  auth: {enabled: true, existingSecret: redis-auth, existingSecretKey: redis-password}
tokens: {existingSecret: floodgate-tokens}
podDisruptionBudget: {enabled: false}
`,
		want:  []string{"ConfigMap/fg-floodgate", "Deployment/fg-floodgate", "Service/fg-floodgate"},
		ports: []string{"admin", "check", "proxy"},
	},
	{
		name:   "servicemonitor",
		values: "serviceMonitor: {enabled: true, labels: {release: prometheus}}\nconfig: {check: {allowed_hosts: [check.example.internal]}}",
		want: []string{"ConfigMap/fg-floodgate", "Deployment/fg-floodgate", "PodDisruptionBudget/fg-floodgate",
			"Secret/fg-floodgate-tokens", "Service/fg-floodgate", "ServiceMonitor/fg-floodgate"},
		ports: []string{"admin", "check", "proxy"},
	},
}

// rendered is one case's objects, decoded.
type rendered struct {
	deployment     *appsv1.Deployment
	service        *corev1.Service
	configMaps     map[string]*corev1.ConfigMap
	secrets        map[string]*corev1.Secret
	pdb            *policyv1.PodDisruptionBudget
	serviceMonitor *monitoringv1.ServiceMonitor
	names          []string
}

// TestChart renders the chart for each case, decodes every object strictly
// into its Kubernetes API type, checks how the objects fit together, and
// validates the rendered floodgate.yaml with floodgate itself, with every
// volume laid out under a directory where the Deployment mounts it.
func TestChart(t *testing.T) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			vals, err := loader.LoadValues(strings.NewReader(c.values))
			if err != nil {
				t.Fatal(err)
			}
			r := render(t, vals)
			if !slices.Equal(r.names, c.want) {
				t.Errorf("objects %v, want %v", r.names, c.want)
			}
			checkPod(t, r)
			checkService(t, r, c.ports)
			checkPDB(t, r)
			checkServiceMonitor(t, r)
			cfg := checkConfig(t, r, c.ports)
			if c.name == "redis-secret" || c.name == "redis-existing-secret" {
				storage, _ := cfg["storage"].(map[string]any)
				redis, _ := storage["redis"].(map[string]any)
				if redis["password_file"] != "../floodgate-secrets/redis/password" {
					t.Errorf("storage.redis: %v, want the mounted password_file", redis)
				}
				if want := map[string]string{"redis-secret": "redis", "redis-existing-secret": "hybrid"}[c.name]; storage["engine"] != want {
					t.Errorf("storage.engine %v, want %s", storage["engine"], want)
				}
			}
		})
	}
}

// TestChartLint runs helm lint's checks, as `helm lint --strict` does, and
// reads values.yaml strictly: a key given twice is an error there too.
func TestChartLint(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.UnmarshalStrict(b, &values); err != nil {
		t.Errorf("values.yaml: %v", err)
	}
	l := lint.RunAll(chartDir, nil, ns)
	for _, m := range l.Messages {
		if m.Severity > support.InfoSev {
			t.Errorf("lint: %v", m)
		}
	}
}

// TestChartRequired: the values a listener cannot do without are asked
// for by name.
func TestChartRequired(t *testing.T) {
	for values, want := range map[string]string{
		"listeners: {postgres: {enabled: true}}":        "postgres.upstream is required",
		"redis: {enabled: true, auth: {enabled: true}}": "redis.auth.password or redis.auth.existingSecret is required",
	} {
		vals, err := loader.LoadValues(strings.NewReader(values))
		if err != nil {
			t.Fatal(err)
		}
		_, err = renderFiles(t, vals)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want %q", values, err, want)
		}
	}
}

// TestChartTokensRandom: a created token Secret without tokens in the
// values holds random ones, 32 characters, one for each listener. (Across
// upgrades they are kept through lookup, which needs a cluster: without
// one, as here, each render draws new ones.)
func TestChartTokensRandom(t *testing.T) {
	a, b := render(t, nil).secrets["fg-floodgate-tokens"], render(t, nil).secrets["fg-floodgate-tokens"]
	if bytes.Equal(a.Data["check-token"], a.Data["admin-token"]) {
		t.Errorf("the check and admin tokens are the same: %q", a.Data["check-token"])
	}
	for _, k := range []string{"check-token", "admin-token"} {
		if len(a.Data[k]) != 32 || bytes.Equal(a.Data[k], b.Data[k]) {
			t.Errorf("%s: %q and %q, want a random 32-character token in each render", k, a.Data[k], b.Data[k])
		}
	}
}

func renderFiles(t *testing.T, vals map[string]any) (map[string]string, error) {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	rv, err := chartutil.ToRenderValues(ch, vals,
		chartcommon.ReleaseOptions{Name: release, Namespace: ns, Revision: 1, IsInstall: true}, chartcommon.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	var e engine.Engine
	e.Strict = true
	return e.RenderWithContext(t.Context(), ch, rv)
}

func render(t *testing.T, vals map[string]any) *rendered {
	t.Helper()
	files, err := renderFiles(t, vals)
	if err != nil {
		t.Fatal(err)
	}
	r := &rendered{configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{}}
	for name, text := range files {
		if strings.HasSuffix(name, "NOTES.txt") {
			if !strings.Contains(text, "fg-floodgate."+ns) {
				t.Errorf("%s: %q", name, text)
			}
			continue
		}
		for doc := range strings.SplitSeq(text, "\n---") {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			js, err := yaml.YAMLToJSONStrict([]byte(doc))
			if err != nil {
				t.Fatalf("%s: %v\n%s", name, err, doc)
			}
			var meta struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
				Metadata   struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			if err := json.Unmarshal(js, &meta); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			var obj any
			switch meta.APIVersion + " " + meta.Kind {
			case "apps/v1 Deployment":
				r.deployment = new(appsv1.Deployment)
				obj = r.deployment
			case "v1 Service":
				r.service = new(corev1.Service)
				obj = r.service
			case "v1 ConfigMap":
				cm := new(corev1.ConfigMap)
				r.configMaps[meta.Metadata.Name] = cm
				obj = cm
			case "v1 Secret":
				s := new(corev1.Secret)
				r.secrets[meta.Metadata.Name] = s
				obj = s
			case "policy/v1 PodDisruptionBudget":
				r.pdb = new(policyv1.PodDisruptionBudget)
				obj = r.pdb
			case "monitoring.coreos.com/v1 ServiceMonitor":
				r.serviceMonitor = new(monitoringv1.ServiceMonitor)
				obj = r.serviceMonitor
			default:
				t.Fatalf("%s: an object of %s %s, which the test does not know", name, meta.APIVersion, meta.Kind)
			}
			dec := json.NewDecoder(bytes.NewReader(js))
			dec.DisallowUnknownFields()
			if err := dec.Decode(obj); err != nil {
				t.Fatalf("%s: %s %s: %v\n%s", name, meta.Kind, meta.Metadata.Name, err, doc)
			}
			if meta.Metadata.Name == "" {
				t.Errorf("%s: %s without a name", name, meta.Kind)
			}
			r.names = append(r.names, meta.Kind+"/"+meta.Metadata.Name)
		}
	}
	sort.Strings(r.names)
	if r.deployment == nil || r.service == nil {
		t.Fatalf("no Deployment or Service among %v", r.names)
	}
	return r
}

// checkPod: the probes, the security context, the resources, and volumes
// that name what is rendered (or the existing Secrets the values name).
func checkPod(t *testing.T, r *rendered) {
	t.Helper()
	d := r.deployment
	spec := d.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers", len(spec.Containers))
	}
	c := spec.Containers[0]
	if c.Image != "floodgate:latest" || c.Command != nil || c.Args != nil {
		t.Errorf("image %q, command %q, args %q: want the image make image builds, with its own command", c.Image, c.Command, c.Args)
	}
	probe := func(what string, p *corev1.Probe, path string) {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != path || p.HTTPGet.Port.String() != "admin" {
			t.Errorf("%s probe %+v, want GET %s on the admin port", what, p, path)
		}
	}
	probe("liveness", c.LivenessProbe, "/healthz")
	probe("readiness", c.ReadinessProbe, "/readyz")
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Errorf("resources %+v: want cpu and memory requests", c.Resources)
	}
	ps, sc := spec.SecurityContext, c.SecurityContext
	if ps == nil || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot || ps.RunAsUser == nil || *ps.RunAsUser != 65532 ||
		ps.RunAsGroup == nil || *ps.RunAsGroup != 65532 {
		t.Errorf("pod securityContext %+v: want non-root 65532", ps)
	}
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("container securityContext %+v: want a read-only root, no privilege escalation, no capabilities", sc)
	}
	if d.Spec.Selector == nil || !selects(d.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
		t.Errorf("selector %v does not select the pod's labels %v", d.Spec.Selector, d.Spec.Template.Labels)
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
		switch {
		case v.ConfigMap != nil:
			if r.configMaps[v.ConfigMap.Name] == nil {
				t.Errorf("volume %s: ConfigMap %s is not rendered", v.Name, v.ConfigMap.Name)
			}
		case v.Secret != nil:
			s := r.secrets[v.Secret.SecretName]
			if s == nil && !slices.Contains([]string{"redis-auth", "floodgate-tokens"}, v.Secret.SecretName) {
				t.Errorf("volume %s: Secret %s is neither rendered nor the existing one", v.Name, v.Secret.SecretName)
			}
			for _, it := range v.Secret.Items {
				if s == nil {
					continue
				}
				if _, ok := s.Data[it.Key]; !ok {
					t.Errorf("volume %s: Secret %s has no key %s", v.Name, v.Secret.SecretName, it.Key)
				}
			}
		default:
			t.Errorf("volume %s: %+v", v.Name, v.VolumeSource)
		}
	}
	for _, m := range c.VolumeMounts {
		if _, ok := volumes[m.Name]; !ok {
			t.Errorf("mount %s: no such volume", m.Name)
		}
		// A subPath mount is never updated: the reload on change needs the
		// directory.
		if m.SubPath != "" || m.SubPathExpr != "" || !m.ReadOnly {
			t.Errorf("mount %s: %+v, want a read-only directory", m.Name, m)
		}
	}
}

func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// checkService: one Service port per container port, by name.
func checkService(t *testing.T, r *rendered, want []string) {
	t.Helper()
	c := r.deployment.Spec.Template.Spec.Containers[0]
	container := map[string]int32{}
	var names []string
	for _, p := range c.Ports {
		container[p.Name] = p.ContainerPort
		names = append(names, p.Name)
	}
	sort.Strings(names)
	if !slices.Equal(names, want) {
		t.Errorf("container ports %v, want %v", names, want)
	}
	var svc []string
	for _, p := range r.service.Spec.Ports {
		svc = append(svc, p.Name)
		if p.TargetPort.String() != p.Name || p.Port != container[p.Name] {
			t.Errorf("service port %+v: want port %d to the container's %s", p, container[p.Name], p.Name)
		}
	}
	sort.Strings(svc)
	if !slices.Equal(svc, want) {
		t.Errorf("service ports %v, want %v", svc, want)
	}
	if !selects(r.service.Spec.Selector, r.deployment.Spec.Template.Labels) {
		t.Errorf("service selector %v does not select the pod's labels", r.service.Spec.Selector)
	}
}

func checkPDB(t *testing.T, r *rendered) {
	t.Helper()
	if r.pdb == nil {
		return
	}
	if r.pdb.Spec.Selector == nil || !selects(r.pdb.Spec.Selector.MatchLabels, r.deployment.Spec.Template.Labels) {
		t.Errorf("PodDisruptionBudget selector %v does not select the pod's labels", r.pdb.Spec.Selector)
	}
	if r.pdb.Spec.MaxUnavailable == nil && r.pdb.Spec.MinAvailable == nil {
		t.Error("PodDisruptionBudget with neither maxUnavailable nor minAvailable")
	}
}

func checkServiceMonitor(t *testing.T, r *rendered) {
	t.Helper()
	sm := r.serviceMonitor
	if sm == nil {
		return
	}
	if !selects(sm.Spec.Selector.MatchLabels, r.service.Labels) {
		t.Errorf("ServiceMonitor selector %v does not select the Service's labels %v", sm.Spec.Selector.MatchLabels, r.service.Labels)
	}
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "admin" || sm.Spec.Endpoints[0].Path != "/metrics" {
		t.Errorf("ServiceMonitor endpoints %+v, want /metrics on the admin port", sm.Spec.Endpoints)
	}
	if sm.Labels["release"] != "prometheus" {
		t.Errorf("ServiceMonitor labels %v: the values' labels are missing", sm.Labels)
	}
}

// checkConfig lays out the pod's volumes under a directory as the kubelet
// mounts them, runs floodgate validate on floodgate.yaml there, and checks
// that each listener listens on its container port. It returns the file,
// decoded.
func checkConfig(t *testing.T, r *rendered, ports []string) map[string]any {
	t.Helper()
	root := t.TempDir()
	spec := r.deployment.Spec.Template.Spec
	mount(t, r, root, 1, nil)
	path := filepath.Join(root, "etc/floodgate/floodgate.yaml")
	out, err := exec.Command(floodgate(t), "validate", path).CombinedOutput()
	if err != nil {
		b, _ := os.ReadFile(path)
		t.Fatalf("floodgate validate: %v\n%s\n%s", err, out, b)
	}

	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.UnmarshalStrict(b, &cfg); err != nil {
		t.Fatal(err)
	}
	section := map[string]string{"proxy": "proxy", "check": "check", "grpc-envoy": "envoy", "postgres": "postgres", "admin": "admin"}
	for _, p := range spec.Containers[0].Ports {
		s, _ := cfg[section[p.Name]].(map[string]any)
		if got, want := s["listen"], fmt.Sprintf(":%d", p.ContainerPort); got != want {
			t.Errorf("%s.listen %v, want %s (its container port)", section[p.Name], got, want)
		}
	}
	for _, s := range []string{"check", "admin"} {
		if m, on := cfg[s].(map[string]any); on {
			hosts, _ := m["allowed_hosts"].([]any)
			if !slices.Contains(hosts, any("fg-floodgate."+ns+".svc.cluster.local")) || !slices.Contains(hosts, any("fg-floodgate")) ||
				r.serviceMonitor != nil && s == "check" && !slices.Contains(hosts, any("check.example.internal")) {
				t.Errorf("%s.allowed_hosts %v: want the Service's names", s, hosts)
			}
		}
	}
	for name, s := range section {
		if _, on := cfg[s]; on != slices.Contains(ports, name) {
			t.Errorf("section %s in the file: %v, want %v", s, on, !on)
		}
	}
	return cfg
}

// mount writes the pod's volumes under root as the kubelet does (its
// AtomicWriter): each volume's files in a directory of their own, named for
// the version, a symlink ..data to it, swapped by renaming a new symlink
// over it, and each file a symlink into ..data. A ConfigMap's or Secret's
// keys are its files (the existing Secrets the values name made up here);
// edit may change them before they are written.
func mount(t *testing.T, r *rendered, root string, version int, edit func(mountPath string, files map[string][]byte)) {
	t.Helper()
	spec := r.deployment.Spec.Template.Spec
	volumes := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
	}
	for _, m := range spec.Containers[0].VolumeMounts {
		v := volumes[m.Name]
		files := map[string][]byte{}
		switch {
		case v.ConfigMap != nil:
			for k, s := range r.configMaps[v.ConfigMap.Name].Data {
				files[k] = []byte(s)
			}
		case v.Secret != nil:
			s := r.secrets[v.Secret.SecretName]
			for _, it := range v.Secret.Items {
				if s != nil {
					files[it.Path] = s.Data[it.Key]
				} else {
					files[it.Path] = []byte("made-up-" + it.Key + "\n")
				}
			}
		}
		if edit != nil {
			edit(m.MountPath, files)
		}
		dir := filepath.Join(root, m.MountPath)
		ts := fmt.Sprintf("..2026_12_01_08_00_%02d.%d", version, version)
		if err := os.MkdirAll(filepath.Join(dir, ts), 0o755); err != nil {
			t.Fatal(err)
		}
		for name, b := range files {
			if err := os.WriteFile(filepath.Join(dir, ts, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		old, _ := os.Readlink(filepath.Join(dir, "..data"))
		if err := os.Symlink(ts, filepath.Join(dir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
		for name := range files {
			link := filepath.Join(dir, name)
			if _, err := os.Lstat(link); err == nil {
				continue
			}
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				t.Fatal(err)
			}
		}
		if old != "" {
			if err := os.RemoveAll(filepath.Join(dir, old)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestChartServe serves the chart's default configuration from the files
// as the kubelet mounts them (its listeners moved to loopback), probes it
// as the Deployment does, and then updates the ConfigMap and the token
// Secret as the kubelet does: the running daemon reloads both.
func TestChartServe(t *testing.T) {
	r := render(t, nil)
	c := r.deployment.Spec.Template.Spec.Containers[0]
	tokens := r.secrets["fg-floodgate-tokens"]
	if tokens == nil {
		t.Fatal("no token Secret")
	}
	loopback := regexp.MustCompile(`(?m)^(\s*listen: )\S+$`)
	root := t.TempDir()
	onLoopback := func(mountPath string, files map[string][]byte) {
		if mountPath == "/etc/floodgate" {
			files["floodgate.yaml"] = loopback.ReplaceAll(files["floodgate.yaml"], []byte("${1}127.0.0.1:0"))
		}
	}
	mount(t, r, root, 1, onLoopback)

	d := serve(t, filepath.Join(root, "etc/floodgate/floodgate.yaml"), 3)
	for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
		if code, _ := do(t, "GET", "http://"+d.addrs[p.HTTPGet.Port.String()]+p.HTTPGet.Path, "", ""); code != 200 {
			t.Errorf("%s: %d", p.HTTPGet.Path, code)
		}
	}
	admin := "http://" + d.addrs["admin"] + "/v1/config"
	adminToken := string(tokens.Data["admin-token"])
	if code, _ := do(t, "GET", admin, "", ""); code != http.StatusUnauthorized {
		t.Errorf("/v1/config without the admin token: %d, want 401", code)
	}
	if code, body := do(t, "GET", admin, adminToken, ""); code != 200 || !strings.Contains(body, "10/min") {
		t.Errorf("/v1/config with the admin token: %d\n%s", code, body)
	}
	body := `{"policy": "default", "key": "helm-test"}`
	var codes []int
	for range 10 {
		code, _ := do(t, "POST", "http://"+d.addrs["check"]+"/v1/check", string(tokens.Data["check-token"]), body)
		if codes = append(codes, code); code == http.StatusTooManyRequests {
			break
		}
	}
	if codes[0] != 200 || codes[len(codes)-1] != http.StatusTooManyRequests {
		t.Errorf("the check API answered %v, want 200s then 429", codes)
	}

	// helm upgrade with another rate and a rotated admin token: the
	// kubelet swaps both volumes' ..data.
	vals, err := loader.LoadValues(strings.NewReader("config: {policies: {default: {rate: 20/min, burst: 5}}}\ntokens: {admin: rotated-admin-token}"))
	if err != nil {
		t.Fatal(err)
	}
	next := render(t, vals)
	next.secrets["fg-floodgate-tokens"].Data["check-token"] = tokens.Data["check-token"]
	mount(t, next, root, 2, onLoopback)
	// The two volumes are swapped one after the other: one reload or two.
	for {
		d.waitLog(t, "configuration reloaded")
		code, body := do(t, "GET", admin, "rotated-admin-token", "")
		if code == 200 && strings.Contains(body, "20/min") {
			break
		}
	}
	if code, _ := do(t, "GET", admin, adminToken, ""); code != http.StatusUnauthorized {
		t.Errorf("/v1/config with the old admin token after the rotation: %d, want 401", code)
	}
}

// daemon is a running floodgate serve.
type daemon struct {
	addrs map[string]string // listener name → address
	mu    sync.Mutex
	logs  strings.Builder
	lines chan string
}

// serve runs floodgate serve file until the test ends, and waits until n
// listeners are bound.
func serve(t *testing.T, file string, n int) *daemon {
	t.Helper()
	cmd := exec.Command(floodgate(t), "serve", file)
	cmd.Env = slices.DeleteFunc(os.Environ(), func(s string) bool { return strings.HasPrefix(s, "FLOODGATE_") })
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &daemon{addrs: map[string]string{}, lines: make(chan string, 1024)}
	bound := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var line struct{ Msg, Listener, Addr string }
			_ = json.Unmarshal(sc.Bytes(), &line)
			d.mu.Lock()
			d.logs.WriteString(sc.Text() + "\n")
			if line.Msg == "listening" {
				d.addrs[line.Listener] = line.Addr
				if len(d.addrs) == n {
					close(bound)
				}
			}
			d.mu.Unlock()
			select {
			case d.lines <- line.Msg:
			default:
			}
		}
		close(d.lines)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			t.Errorf("floodgate serve after SIGTERM: %v\n%s", err, d.logged())
		}
	})
	select {
	case <-bound:
	case <-time.After(30 * time.Second):
		t.Fatalf("floodgate serve did not bind its %d listeners:\n%s", n, d.logged())
	}
	return d
}

func (d *daemon) logged() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.logs.String()
}

// waitLog waits for a log line with the message msg.
func (d *daemon) waitLog(t *testing.T, msg string) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case m, ok := <-d.lines:
			if !ok {
				t.Fatalf("floodgate serve ended before %q:\n%s", msg, d.logged())
			}
			if m == msg {
				return
			}
		case <-timeout:
			t.Fatalf("no %q in 30s:\n%s", msg, d.logged())
		}
	}
}

func do(t *testing.T, method, url, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
	buildOut  []byte
)

// floodgate builds cmd/floodgate from this tree, as a user's build sees
// the module (GOWORK=off), once.
func floodgate(t *testing.T) string {
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "floodgate-helm")
		if err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(dir, "floodgate")
		cmd := exec.Command("go", "build", "-o", binary, "./cmd/floodgate")
		cmd.Dir = "../.."
		cmd.Env = append(os.Environ(), "GOWORK=off")
		buildOut, buildErr = cmd.CombinedOutput()
	})
	if buildErr != nil {
		t.Fatalf("building floodgate: %v\n%s", buildErr, buildOut)
	}
	return binary
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binary != "" {
		os.RemoveAll(filepath.Dir(binary))
	}
	os.Exit(code)
}
