// Package charts holds the tests of the Helm chart in charts/shoal: it is
// rendered with the Helm SDK for a matrix of values, every object is decoded
// strictly into its Kubernetes API type, and the wiring between the objects
// is checked.
package charts

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/config"
	_ "github.com/prometheus/prometheus/discovery/kubernetes" // kubernetes_sd_configs in the rendered configuration
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"sigs.k8s.io/yaml"
)

const (
	release   = "obs"
	namespace = "monitoring"
	fullname  = "obs-shoal"
	headless  = "obs-shoal-cluster"
)

// monitoringAPI is what a cluster with the Prometheus Operator's CRDs reports.
var monitoringAPI = []string{
	"monitoring.coreos.com/v1",
	"monitoring.coreos.com/v1/ServiceMonitor",
	"monitoring.coreos.com/v1/PrometheusRule",
}

// serviceMonitor and prometheusRule hold the fields the chart sets; decoding
// is strict, so a field outside the operator's API fails the test.
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector          metav1.LabelSelector `json:"selector"`
		NamespaceSelector struct {
			MatchNames []string `json:"matchNames"`
		} `json:"namespaceSelector"`
		Endpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// certificate holds the fields of a cert-manager Certificate the chart
// sets; decoding is strict.
type certificate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		SecretName  string   `json:"secretName"`
		CommonName  string   `json:"commonName"`
		DNSNames    []string `json:"dnsNames"`
		Duration    string   `json:"duration"`
		RenewBefore string   `json:"renewBefore"`
		PrivateKey  struct {
			Algorithm      string `json:"algorithm"`
			Size           int    `json:"size"`
			RotationPolicy string `json:"rotationPolicy"`
		} `json:"privateKey"`
		Usages    []string `json:"usages"`
		IssuerRef struct {
			Kind  string `json:"kind"`
			Name  string `json:"name"`
			Group string `json:"group"`
		} `json:"issuerRef"`
	} `json:"spec"`
}

type prometheusRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              json.RawMessage `json:"spec"`
}

// rendered is one render of the chart, decoded.
type rendered struct {
	t     *testing.T
	notes string

	statefulSets    []*appsv1.StatefulSet
	deployments     []*appsv1.Deployment
	daemonSets      []*appsv1.DaemonSet
	services        []*corev1.Service
	configMaps      []*corev1.ConfigMap
	secrets         []*corev1.Secret
	serviceAccounts []*corev1.ServiceAccount
	clusterRoles    []*rbacv1.ClusterRole
	clusterBindings []*rbacv1.ClusterRoleBinding
	roles           []*rbacv1.Role
	roleBindings    []*rbacv1.RoleBinding
	pdbs            []*policyv1.PodDisruptionBudget
	hpas            []*autoscalingv2.HorizontalPodAutoscaler
	serviceMonitors []*serviceMonitor
	rules           []*prometheusRule
	certificates    []*certificate
}

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := loader.Load("shoal")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// renderOpts are the inputs of one render besides the values.
type renderOpts struct {
	apis    []string         // extra API versions the cluster reports
	upgrade bool             // render as an upgrade rather than an install
	lookup  []runtime.Object // objects `lookup` finds in the cluster
}

func render(t *testing.T, valuesYAML string, o renderOpts) *rendered {
	t.Helper()
	out, err := renderRaw(t, valuesYAML, o)
	if err != nil {
		t.Fatal(err)
	}
	r := &rendered{t: t}
	for name, manifest := range out {
		if strings.HasSuffix(name, "NOTES.txt") {
			r.notes = manifest
			continue
		}
		for _, doc := range splitYAML(manifest) {
			r.decode(name, doc)
		}
	}
	return r
}

func renderRaw(t *testing.T, valuesYAML string, o renderOpts) (map[string]string, error) {
	t.Helper()
	c := loadChart(t)
	vals, err := chartutil.ReadValues([]byte(valuesYAML))
	if err != nil {
		t.Fatal(err)
	}
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = chartutil.KubeVersion{Version: "v1.33.0", Major: "1", Minor: "33"}
	caps.APIVersions = append(slices.Clone(caps.APIVersions), o.apis...)
	rv, err := chartutil.ToRenderValues(c, vals, chartutil.ReleaseOptions{
		Name: release, Namespace: namespace, Revision: 1, IsInstall: !o.upgrade, IsUpgrade: o.upgrade,
	}, caps)
	if err != nil {
		return nil, err
	}
	return engine.RenderWithClientProvider(c, rv, fakeClients{objects: o.lookup})
}

// fakeClients answers `lookup` from a fake dynamic client.
type fakeClients struct{ objects []runtime.Object }

func (f fakeClients) GetClientFor(apiVersion, kind string) (dynamic.NamespaceableResourceInterface, bool, error) {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return nil, false, err
	}
	gvr := gv.WithResource(strings.ToLower(kind) + "s")
	s := runtime.NewScheme()
	if err := corev1.AddToScheme(s); err != nil {
		return nil, false, err
	}
	var objs []runtime.Object
	for _, o := range f.objects {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			return nil, false, err
		}
		objs = append(objs, &unstructured.Unstructured{Object: u})
	}
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(s, map[schema.GroupVersionResource]string{gvr: kind + "List"}, objs...)
	return client.Resource(gvr), true, nil
}

func splitYAML(manifest string) []string {
	var docs []string
	for _, d := range regexp.MustCompile(`(?m)^---\s*$`).Split(manifest, -1) {
		if strings.TrimSpace(stripComments(d)) != "" {
			docs = append(docs, d)
		}
	}
	return docs
}

func stripComments(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// decode decodes one object strictly (unknown fields fail) into its type.
func (r *rendered) decode(file, doc string) {
	t := r.t
	t.Helper()
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
		t.Fatalf("%s: %v\n%s", file, err, doc)
	}
	strict := func(into any) {
		t.Helper()
		if err := yaml.UnmarshalStrict([]byte(doc), into); err != nil {
			t.Fatalf("%s: %s %s does not decode strictly: %v\n%s", file, tm.APIVersion, tm.Kind, err, doc)
		}
	}
	switch gvk := tm.APIVersion + "/" + tm.Kind; gvk {
	case "apps/v1/StatefulSet":
		o := &appsv1.StatefulSet{}
		strict(o)
		r.statefulSets = append(r.statefulSets, o)
	case "apps/v1/Deployment":
		o := &appsv1.Deployment{}
		strict(o)
		r.deployments = append(r.deployments, o)
	case "apps/v1/DaemonSet":
		o := &appsv1.DaemonSet{}
		strict(o)
		r.daemonSets = append(r.daemonSets, o)
	case "v1/Service":
		o := &corev1.Service{}
		strict(o)
		r.services = append(r.services, o)
	case "v1/ConfigMap":
		o := &corev1.ConfigMap{}
		strict(o)
		r.configMaps = append(r.configMaps, o)
	case "v1/Secret":
		o := &corev1.Secret{}
		strict(o)
		r.secrets = append(r.secrets, o)
	case "v1/ServiceAccount":
		o := &corev1.ServiceAccount{}
		strict(o)
		r.serviceAccounts = append(r.serviceAccounts, o)
	case "rbac.authorization.k8s.io/v1/ClusterRole":
		o := &rbacv1.ClusterRole{}
		strict(o)
		r.clusterRoles = append(r.clusterRoles, o)
	case "rbac.authorization.k8s.io/v1/ClusterRoleBinding":
		o := &rbacv1.ClusterRoleBinding{}
		strict(o)
		r.clusterBindings = append(r.clusterBindings, o)
	case "rbac.authorization.k8s.io/v1/Role":
		o := &rbacv1.Role{}
		strict(o)
		r.roles = append(r.roles, o)
	case "rbac.authorization.k8s.io/v1/RoleBinding":
		o := &rbacv1.RoleBinding{}
		strict(o)
		r.roleBindings = append(r.roleBindings, o)
	case "policy/v1/PodDisruptionBudget":
		o := &policyv1.PodDisruptionBudget{}
		strict(o)
		r.pdbs = append(r.pdbs, o)
	case "autoscaling/v2/HorizontalPodAutoscaler":
		o := &autoscalingv2.HorizontalPodAutoscaler{}
		strict(o)
		r.hpas = append(r.hpas, o)
	case "monitoring.coreos.com/v1/ServiceMonitor":
		o := &serviceMonitor{}
		strict(o)
		r.serviceMonitors = append(r.serviceMonitors, o)
	case "monitoring.coreos.com/v1/PrometheusRule":
		o := &prometheusRule{}
		strict(o)
		r.rules = append(r.rules, o)
	case "cert-manager.io/v1/Certificate":
		o := &certificate{}
		strict(o)
		r.certificates = append(r.certificates, o)
	default:
		t.Fatalf("%s: unexpected object %s", file, gvk)
	}
}

// pod returns the pod template of the single workload.
func (r *rendered) pod() *corev1.PodTemplateSpec {
	r.t.Helper()
	switch n := len(r.statefulSets) + len(r.deployments) + len(r.daemonSets); {
	case n == 1 && len(r.statefulSets) == 1:
		return &r.statefulSets[0].Spec.Template
	case n == 1 && len(r.deployments) == 1:
		return &r.deployments[0].Spec.Template
	case n == 1 && len(r.daemonSets) == 1:
		return &r.daemonSets[0].Spec.Template
	}
	r.t.Fatalf("want exactly one workload, got %d StatefulSets, %d Deployments and %d DaemonSets", len(r.statefulSets), len(r.deployments), len(r.daemonSets))
	return nil
}

func (r *rendered) container() *corev1.Container {
	r.t.Helper()
	p := r.pod()
	if len(p.Spec.Containers) != 1 {
		r.t.Fatalf("want one container, got %d", len(p.Spec.Containers))
	}
	return &p.Spec.Containers[0]
}

// flag returns the values of --name=value in the container's args.
func (r *rendered) flag(name string) []string {
	var vals []string
	for _, a := range r.container().Args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			vals = append(vals, v)
		} else if a == "--"+name {
			vals = append(vals, "true")
		}
	}
	return vals
}

func (r *rendered) oneFlag(name string) string {
	r.t.Helper()
	v := r.flag(name)
	if len(v) != 1 {
		r.t.Fatalf("want --%s once, got %v in %v", name, v, r.container().Args)
	}
	return v[0]
}

func (r *rendered) service(name string) *corev1.Service {
	r.t.Helper()
	for _, s := range r.services {
		if s.Name == name {
			return s
		}
	}
	r.t.Fatalf("no Service %s", name)
	return nil
}

func (r *rendered) configMap(name string) *corev1.ConfigMap {
	r.t.Helper()
	for _, c := range r.configMaps {
		if c.Name == name {
			return c
		}
	}
	r.t.Fatalf("no ConfigMap %s", name)
	return nil
}

// shoalConfig loads the rendered configuration file with Prometheus' own
// (strict) loader, as shoal does.
func (r *rendered) shoalConfig() *config.Config {
	r.t.Helper()
	cm := r.configMap(fullname)
	cfg, err := config.Load(cm.Data["shoal.yml"], promslog.NewNopLogger())
	if err != nil {
		r.t.Fatalf("rendered configuration does not load: %v\n%s", err, cm.Data["shoal.yml"])
	}
	return cfg
}

// mountOf returns the volume mounted at the deepest mount point containing p.
func (r *rendered) mountOf(p string) (corev1.VolumeMount, bool) {
	var best corev1.VolumeMount
	found := false
	for _, m := range r.container().VolumeMounts {
		if (p == m.MountPath || strings.HasPrefix(p, strings.TrimSuffix(m.MountPath, "/")+"/")) && len(m.MountPath) > len(best.MountPath) {
			best, found = m, true
		}
	}
	return best, found
}

func (r *rendered) volume(name string) corev1.Volume {
	r.t.Helper()
	for _, v := range r.pod().Spec.Volumes {
		if v.Name == name {
			return v
		}
	}
	r.t.Fatalf("no volume %s", name)
	return corev1.Volume{}
}

// checkCommon asserts what every render must satisfy.
func (r *rendered) checkCommon() {
	t := r.t
	t.Helper()
	pod, c := r.pod(), r.container()

	// The headless Service publishes not-ready addresses and carries the gossip port.
	hs := r.service(headless)
	if hs.Spec.ClusterIP != corev1.ClusterIPNone || !hs.Spec.PublishNotReadyAddresses {
		t.Errorf("headless Service: clusterIP %q publishNotReadyAddresses %v", hs.Spec.ClusterIP, hs.Spec.PublishNotReadyAddresses)
	}
	// The join address names it, in the release namespace, on its gossip port.
	join := r.oneFlag("cluster.join")
	host, port, ok := strings.Cut(join, ":")
	if !ok || host != headless+"."+namespace+".svc" {
		t.Errorf("--cluster.join=%s does not name the headless Service %s.%s.svc", join, headless, namespace)
	}
	gossipOnService := false
	for _, p := range hs.Spec.Ports {
		if strconv.Itoa(int(p.Port)) == port && p.Protocol == corev1.ProtocolTCP {
			gossipOnService = true
		}
	}
	if !gossipOnService {
		t.Errorf("the headless Service has no TCP port %s for --cluster.join", port)
	}
	if got, want := r.oneFlag("cluster.listen-address"), "0.0.0.0:"+port; got != want {
		t.Errorf("--cluster.listen-address=%s, want %s (the port peers join)", got, want)
	}
	if r.oneFlag("cluster.enabled") != "true" {
		t.Error("--cluster.enabled missing")
	}
	// node-local targets need the replica's Kubernetes node (the flag's
	// default is $NODE_NAME), from the downward API.
	nodeName := false
	for _, e := range c.Env {
		if e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName" {
			nodeName = true
		}
	}
	if !nodeName {
		t.Error("env NODE_NAME from spec.nodeName missing: node-local sharding would fall back to the ring")
	}

	// Pod labels select the pod for both Services.
	for _, s := range r.services {
		for k, v := range s.Spec.Selector {
			if pod.Labels[k] != v {
				t.Errorf("Service %s selects %s=%s; the pod has %q", s.Name, k, v, pod.Labels[k])
			}
		}
	}

	// Spread across nodes, selecting these pods.
	spread := false
	for _, tsc := range pod.Spec.TopologySpreadConstraints {
		if tsc.TopologyKey == "kubernetes.io/hostname" && tsc.LabelSelector != nil && labelsMatch(tsc.LabelSelector.MatchLabels, pod.Labels) {
			spread = true
		}
	}
	if !spread {
		t.Errorf("no topology spread across kubernetes.io/hostname selecting the pods: %+v", pod.Spec.TopologySpreadConstraints)
	}

	// Non-root, read-only, no capabilities, RuntimeDefault seccomp.
	psc := pod.Spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Errorf("pod does not run as non-root: %+v", psc)
	}
	if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod seccomp profile is not RuntimeDefault: %+v", psc)
	}
	csc := c.SecurityContext
	if csc == nil || csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem ||
		csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation ||
		csc.Capabilities == nil || !slices.Contains(csc.Capabilities.Drop, "ALL") {
		t.Errorf("container security context is not locked down: %+v", csc)
	}

	// Probes.
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/-/ready" {
		t.Errorf("readiness probe is not /-/ready: %+v", c.ReadinessProbe)
	}
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/-/healthy" {
		t.Errorf("liveness probe is not /-/healthy: %+v", c.LivenessProbe)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Errorf("no resource requests: %+v", c.Resources)
	}

	// Termination grace covers hand-off, flush and leaving the cluster (5s).
	grace := mustDuration(t, r.oneFlag("cluster.terminate-grace")) + mustDuration(t, r.oneFlag("storage.remote.flush-deadline")) + 5*time.Second
	if pod.Spec.TerminationGracePeriodSeconds == nil || time.Duration(*pod.Spec.TerminationGracePeriodSeconds)*time.Second < grace {
		t.Errorf("terminationGracePeriodSeconds %v is shorter than hand-off + flush + leave = %v", pod.Spec.TerminationGracePeriodSeconds, grace)
	}

	// The configuration file is the mounted ConfigMap and loads in Prometheus' parser.
	cfgPath := r.oneFlag("config.file")
	m, ok := r.mountOf(cfgPath)
	if !ok || r.volume(m.Name).ConfigMap == nil || r.volume(m.Name).ConfigMap.Name != fullname ||
		path.Join(m.MountPath, "shoal.yml") != cfgPath {
		t.Errorf("--config.file=%s is not shoal.yml of ConfigMap %s (mount %+v)", cfgPath, fullname, m)
	}
	r.shoalConfig()
	// The pods roll when the configuration changes.
	sum := sha256.Sum256([]byte(strings.TrimSuffix(r.configMap(fullname).Data["shoal.yml"], "\n")))
	if got := pod.Annotations["checksum/config"]; got != hex.EncodeToString(sum[:]) {
		t.Errorf("checksum/config = %q, want the sha256 of the configuration %x", got, sum)
	}

	// Every flag is one shoal has.
	known := shoalFlags(t)
	for _, a := range c.Args {
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !known[name] {
			t.Errorf("argument %q is not a shoal flag", a)
		}
	}

	// The gossip key file, when set, is inside a mounted Secret volume.
	if kf := r.flag("cluster.secret-key-file"); len(kf) == 1 {
		m, ok := r.mountOf(kf[0])
		if !ok || r.volume(m.Name).Secret == nil {
			t.Errorf("--cluster.secret-key-file=%s is not in a mounted Secret", kf[0])
		}
	}

	// RBAC grants read verbs only.
	var rules []rbacv1.PolicyRule
	for _, cr := range r.clusterRoles {
		rules = append(rules, cr.Rules...)
	}
	for _, ro := range r.roles {
		rules = append(rules, ro.Rules...)
	}
	for _, rule := range rules {
		for _, v := range rule.Verbs {
			if v != "get" && v != "list" && v != "watch" {
				t.Errorf("RBAC grants %q on %v; only get, list and watch are allowed", v, rule.Resources)
			}
		}
		// Secrets only by name (monitors.enabled reads the ones monitors
		// reference): a list or watch would hand over every Secret.
		secretsListed := slices.Contains(rule.Resources, "secrets") && !slices.Equal(rule.Verbs, []string{"get"})
		if slices.Contains(rule.Resources, "*") || slices.Contains(rule.APIGroups, "*") || secretsListed {
			t.Errorf("RBAC rule too broad: %+v", rule)
		}
	}
	for _, b := range r.clusterBindings {
		r.checkSubject(b.Subjects)
	}
	for _, b := range r.roleBindings {
		r.checkSubject(b.Subjects)
	}
	if pod.Spec.ServiceAccountName == "" {
		t.Error("no serviceAccountName")
	}

	// Dashboards are valid JSON in ConfigMaps the Grafana sidecar picks up.
	for _, cm := range r.configMaps {
		if cm.Labels["grafana_dashboard"] == "" {
			continue
		}
		for k, v := range cm.Data {
			var d map[string]any
			if err := json.Unmarshal([]byte(v), &d); err != nil || d["uid"] == nil {
				t.Errorf("dashboard %s/%s is not a dashboard: %v", cm.Name, k, err)
			}
		}
	}
	if !strings.Contains(r.notes, "port-forward svc/"+fullname) {
		t.Errorf("NOTES.txt does not tell how to open the status page:\n%s", r.notes)
	}
}

func (r *rendered) checkSubject(subjects []rbacv1.Subject) {
	r.t.Helper()
	sa := r.pod().Spec.ServiceAccountName
	if len(subjects) != 1 || subjects[0].Kind != "ServiceAccount" || subjects[0].Name != sa || subjects[0].Namespace != namespace {
		r.t.Errorf("binding subjects %+v, want the pods' ServiceAccount %s/%s", subjects, namespace, sa)
	}
}

func labelsMatch(selector, labels map[string]string) bool {
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

func mustDuration(t *testing.T, s string) time.Duration {
	t.Helper()
	d, err := model.ParseDuration(s)
	if err != nil {
		t.Fatalf("duration %q: %v", s, err)
	}
	return time.Duration(d)
}

// shoalFlags reads the flag names cmd/shoal defines, so that the chart can
// never pass a flag the binary refuses.
func shoalFlags(t *testing.T) map[string]bool {
	t.Helper()
	var src []byte
	for _, f := range []string{"../cmd/shoal/main.go", "../cmd/shoal/monitors.go"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src = append(src, b...)
	}
	known := map[string]bool{"log.level": true, "log.format": true} // promslog's flags
	for _, m := range regexp.MustCompile(`app\.Flag\("([a-z0-9.-]+)"`).FindAllStringSubmatch(string(src), -1) {
		known[m[1]] = true
	}
	if !known["cluster.join"] {
		t.Fatal("found no flags in cmd/shoal/main.go")
	}
	return known
}

func jobNames(cfg *config.Config) []string {
	var names []string
	for _, sc := range cfg.ScrapeConfigs {
		names = append(names, sc.JobName)
	}
	return names
}

// The default install: a three-replica StatefulSet cluster that collects at once.
func TestDefaults(t *testing.T) {
	r := render(t, "", renderOpts{})
	r.checkCommon()
	if len(r.statefulSets) != 1 {
		t.Fatalf("want a StatefulSet, got %d", len(r.statefulSets))
	}
	sts := r.statefulSets[0]
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 3 {
		t.Errorf("replicas = %v, want 3", sts.Spec.Replicas)
	}
	if sts.Spec.ServiceName != headless {
		t.Errorf("serviceName = %q, want the headless Service %q", sts.Spec.ServiceName, headless)
	}
	if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("podManagementPolicy = %q, want Parallel", sts.Spec.PodManagementPolicy)
	}
	if p := sts.Spec.PersistentVolumeClaimRetentionPolicy; p == nil || p.WhenScaled != appsv1.RetainPersistentVolumeClaimRetentionPolicyType {
		t.Errorf("PVC retention policy %+v, want whenScaled Retain", p)
	}
	// The WAL volume is mounted exactly at --storage.path.
	if len(sts.Spec.VolumeClaimTemplates) != 1 {
		t.Fatalf("want one volumeClaimTemplate, got %d", len(sts.Spec.VolumeClaimTemplates))
	}
	pvc := sts.Spec.VolumeClaimTemplates[0]
	if pvc.Spec.Resources.Requests.Storage().IsZero() {
		t.Error("the WAL volume has no size")
	}
	storage := r.oneFlag("storage.path")
	mounted := false
	for _, m := range r.container().VolumeMounts {
		if m.Name == pvc.Name {
			mounted = true
			if m.MountPath != storage {
				t.Errorf("WAL volume mounted at %s, --storage.path=%s", m.MountPath, storage)
			}
		}
	}
	if !mounted {
		t.Errorf("volumeClaimTemplate %s is not mounted", pvc.Name)
	}
	if r.oneFlag("cluster.wait-for-size") != "3" {
		t.Errorf("--cluster.wait-for-size=%s, want the replica count 3", r.oneFlag("cluster.wait-for-size"))
	}
	if r.oneFlag("cluster.wait-timeout") == "" {
		t.Error("no --cluster.wait-timeout")
	}
	if r.oneFlag("cluster.name") != release {
		t.Errorf("--cluster.name=%s, want the release name", r.oneFlag("cluster.name"))
	}
	if len(r.serviceAccounts) != 1 || r.serviceAccounts[0].Name != r.pod().Spec.ServiceAccountName {
		t.Errorf("ServiceAccount %v does not match the pods' %q", r.serviceAccounts, r.pod().Spec.ServiceAccountName)
	}
	if len(r.clusterRoles) != 1 || len(r.clusterBindings) != 1 || len(r.roles) != 0 {
		t.Errorf("want one ClusterRole and binding, got %d/%d (roles %d)", len(r.clusterRoles), len(r.clusterBindings), len(r.roles))
	}
	// A generated 32-byte gossip key.
	if len(r.secrets) != 1 {
		t.Fatalf("want the gossip key Secret, got %d Secrets", len(r.secrets))
	}
	if key := r.secrets[0].Data["gossip-key"]; len(key) != 32 {
		t.Errorf("gossip key has %d bytes, want 32", len(key))
	}
	if r.volume("gossip-key").Secret.SecretName != r.secrets[0].Name {
		t.Error("the gossip key volume does not use the generated Secret")
	}
	// PDB.
	if len(r.pdbs) != 1 {
		t.Fatalf("want a PodDisruptionBudget, got %d", len(r.pdbs))
	}
	pdb := r.pdbs[0]
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 ||
		pdb.Spec.UnhealthyPodEvictionPolicy == nil || *pdb.Spec.UnhealthyPodEvictionPolicy != policyv1.AlwaysAllow ||
		!labelsMatch(pdb.Spec.Selector.MatchLabels, r.pod().Labels) {
		t.Errorf("PDB %+v, want maxUnavailable 1, AlwaysAllow, selecting the pods", pdb.Spec)
	}
	if len(r.hpas) != 0 || len(r.serviceMonitors) != 0 || len(r.rules) != 0 {
		t.Errorf("optional objects rendered by default: %d HPA, %d ServiceMonitor, %d PrometheusRule", len(r.hpas), len(r.serviceMonitors), len(r.rules))
	}
	// The default configuration scrapes shoal itself and annotated pods and services.
	cfg := r.shoalConfig()
	if got, want := jobNames(cfg), []string{"shoal", "kubernetes-pods", "kubernetes-service-endpoints"}; !slices.Equal(got, want) {
		t.Errorf("jobs %v, want %v", got, want)
	}
	if len(cfg.RemoteWriteConfigs) != 0 {
		t.Errorf("remote write configured by default: %v", cfg.RemoteWriteConfigs)
	}
	if !strings.Contains(r.notes, "no remoteWrite endpoint") {
		t.Error("NOTES.txt does not warn that nothing is sent anywhere")
	}
	// Two dashboards.
	dashboards := 0
	for _, cm := range r.configMaps {
		if cm.Labels["grafana_dashboard"] == "1" {
			dashboards++
		}
	}
	if dashboards != 2 {
		t.Errorf("want 2 dashboard ConfigMaps, got %d", dashboards)
	}
}

func TestDeployment(t *testing.T) {
	r := render(t, "controller: {type: deployment, replicas: 4}\nstorage: {path: /var/lib/shoal}\n", renderOpts{})
	r.checkCommon()
	if len(r.deployments) != 1 || len(r.statefulSets) != 0 {
		t.Fatalf("want one Deployment and no StatefulSet, got %d/%d", len(r.deployments), len(r.statefulSets))
	}
	m, ok := r.mountOf(r.oneFlag("storage.path"))
	if !ok || m.MountPath != "/var/lib/shoal" || r.volume(m.Name).EmptyDir == nil {
		t.Errorf("--storage.path=%s is not an emptyDir mounted there: %+v", r.oneFlag("storage.path"), m)
	}
	if r.oneFlag("cluster.wait-for-size") != "4" {
		t.Errorf("--cluster.wait-for-size=%s, want 4", r.oneFlag("cluster.wait-for-size"))
	}
	if !strings.Contains(r.notes, "emptyDir") {
		t.Error("NOTES.txt does not warn that the WAL lives in an emptyDir")
	}
	if !strings.Contains(r.notes, "hands them to a live peer") || strings.Contains(r.notes, "lost when a pod goes away") {
		t.Errorf("NOTES.txt should say that a stopping replica hands its backlog over:\n%s", r.notes)
	}
	off := render(t, "controller: {type: deployment}\ncluster: {handover: {timeout: 0m}}\n", renderOpts{})
	if !strings.Contains(off.notes, "lost when a pod goes away") {
		t.Errorf("NOTES.txt with the hand-over off should warn that the WAL is lost with the pod:\n%s", off.notes)
	}
}

func TestAutoscaling(t *testing.T) {
	r := render(t, "autoscaling: {enabled: true, minReplicas: 4, maxReplicas: 12}\n", renderOpts{})
	r.checkCommon()
	if len(r.hpas) != 1 {
		t.Fatalf("want an HPA, got %d", len(r.hpas))
	}
	h := r.hpas[0]
	if h.Spec.ScaleTargetRef.Kind != "StatefulSet" || h.Spec.ScaleTargetRef.Name != r.statefulSets[0].Name {
		t.Errorf("HPA targets %+v", h.Spec.ScaleTargetRef)
	}
	if *h.Spec.MinReplicas != 4 || h.Spec.MaxReplicas != 12 {
		t.Errorf("HPA replicas %d..%d, want 4..12", *h.Spec.MinReplicas, h.Spec.MaxReplicas)
	}
	if b := h.Spec.Behavior; b == nil || b.ScaleDown == nil || b.ScaleDown.StabilizationWindowSeconds == nil || *b.ScaleDown.StabilizationWindowSeconds < 300 {
		t.Errorf("HPA scale-down is not stabilised: %+v", h.Spec.Behavior)
	}
	if r.statefulSets[0].Spec.Replicas != nil {
		t.Error("the StatefulSet sets replicas although the HPA owns them")
	}
	if r.oneFlag("cluster.wait-for-size") != "4" {
		t.Errorf("--cluster.wait-for-size=%s, want minReplicas 4", r.oneFlag("cluster.wait-for-size"))
	}
	// The schema caps maxReplicas.
	if _, err := renderRaw(t, "autoscaling: {enabled: true, maxReplicas: 500}\n", renderOpts{}); err == nil {
		t.Error("maxReplicas 500 was accepted")
	}
}

func TestRBACNamespaced(t *testing.T) {
	r := render(t, "rbac: {namespaced: true}\n", renderOpts{})
	r.checkCommon()
	if len(r.clusterRoles) != 0 || len(r.clusterBindings) != 0 {
		t.Errorf("namespaced RBAC rendered %d ClusterRoles and %d bindings", len(r.clusterRoles), len(r.clusterBindings))
	}
	if len(r.roles) != 1 || len(r.roleBindings) != 1 || r.roles[0].Namespace != namespace || r.roleBindings[0].Namespace != namespace {
		t.Fatalf("want a Role and RoleBinding in %s", namespace)
	}
	// Discovery asks only for the namespace the Role covers.
	for _, sc := range r.shoalConfig().ScrapeConfigs {
		b, err := yaml.Marshal(sc.ServiceDiscoveryConfigs)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "- "+namespace) {
			t.Errorf("job %s discovers outside %s:\n%s", sc.JobName, namespace, b)
		}
	}
	// Nothing to discover: no role at all.
	r = render(t, "config: {scrapeSelf: false, scrapeAnnotatedPods: false, scrapeAnnotatedServices: false}\n", renderOpts{})
	if len(r.clusterRoles)+len(r.roles) != 0 {
		t.Error("a role is created although no discovery needs one")
	}
	// Only annotated pods: pods, and no services or endpointslices.
	r = render(t, "config: {scrapeSelf: false, scrapeAnnotatedServices: false}\n", renderOpts{})
	if len(r.clusterRoles) != 1 || len(r.clusterRoles[0].Rules) != 1 || !slices.Equal(r.clusterRoles[0].Rules[0].Resources, []string{"pods"}) {
		t.Errorf("pod discovery only: rules %+v, want pods alone", r.clusterRoles)
	}
	// Write verbs are refused by the schema.
	if _, err := renderRaw(t, "rbac: {extraRules: [{apiGroups: [''], resources: [configmaps], verbs: [create]}]}\n", renderOpts{}); err == nil {
		t.Error("an extra rule with verb create was accepted")
	}
}

func TestExistingGossipSecret(t *testing.T) {
	r := render(t, "cluster: {gossipKey: {existingSecret: my-key, secretKey: key}}\n", renderOpts{})
	r.checkCommon()
	if len(r.secrets) != 0 {
		t.Errorf("a Secret was generated although an existing one is named")
	}
	if v := r.volume("gossip-key"); v.Secret == nil || v.Secret.SecretName != "my-key" {
		t.Errorf("gossip key volume %+v, want Secret my-key", v)
	}
	if got := r.oneFlag("cluster.secret-key-file"); path.Base(got) != "key" {
		t.Errorf("--cluster.secret-key-file=%s, want the key \"key\"", got)
	}
	// No key at all.
	r = render(t, "cluster: {gossipKey: {create: false}}\n", renderOpts{})
	if len(r.secrets) != 0 || len(r.flag("cluster.secret-key-file")) != 0 {
		t.Error("gossip encryption configured although disabled")
	}
}

// Gossip over TLS with a cert-manager Certificate or an existing Secret: the
// flags name the files of a whole-Secret mount (so renewals reach the pod),
// and the Certificate carries the name the peers check.
func TestGossipTLS(t *testing.T) {
	r := render(t, "cluster: {tls: {enabled: true, certManager: {enabled: true, issuerRef: {name: gossip-ca}}}}\n", renderOpts{})
	r.checkCommon()
	if len(r.certificates) != 1 {
		t.Fatalf("%d Certificates, want 1", len(r.certificates))
	}
	c := r.certificates[0].Spec
	name := headless + "." + namespace + ".svc"
	if c.SecretName != fullname+"-gossip-tls" || !slices.Equal(c.DNSNames, []string{name}) || c.IssuerRef.Name != "gossip-ca" ||
		!slices.Contains(c.Usages, "client auth") || !slices.Contains(c.Usages, "server auth") {
		t.Errorf("Certificate spec %+v", c)
	}
	if v := r.volume("gossip-tls"); v.Secret == nil || v.Secret.SecretName != c.SecretName {
		t.Errorf("gossip TLS volume %+v, want Secret %s", v, c.SecretName)
	}
	for flag, file := range map[string]string{"cluster.tls-cert-file": "tls.crt", "cluster.tls-key-file": "tls.key", "cluster.tls-ca-file": "ca.crt"} {
		got := r.oneFlag(flag)
		m, ok := r.mountOf(got)
		if path.Base(got) != file || !ok || m.Name != "gossip-tls" || m.SubPath != "" {
			t.Errorf("--%s=%s (mount %+v), want %s in the whole gossip-tls volume", flag, got, m, file)
		}
	}
	if got := r.oneFlag("cluster.tls-server-name"); got != name {
		t.Errorf("--cluster.tls-server-name=%s, want %s", got, name)
	}
	if got := r.oneFlag("cluster.tls-min-version"); got != "TLS13" {
		t.Errorf("--cluster.tls-min-version=%s", got)
	}

	r = render(t, "cluster: {tls: {enabled: true, existingSecret: my-tls}}\n", renderOpts{})
	r.checkCommon()
	if len(r.certificates) != 0 || len(r.flag("cluster.tls-server-name")) != 0 {
		t.Error("existing Secret: a Certificate or a server name was set")
	}
	if v := r.volume("gossip-tls"); v.Secret == nil || v.Secret.SecretName != "my-tls" {
		t.Errorf("gossip TLS volume %+v, want Secret my-tls", v)
	}
	if len(render(t, "", renderOpts{}).flag("cluster.tls-cert-file")) != 0 {
		t.Error("gossip TLS on by default")
	}
	for _, bad := range []string{
		"cluster: {tls: {enabled: true}}\n",
		"cluster: {tls: {enabled: true, certManager: {enabled: true}}}\n",
		"cluster: {tls: {enabled: true, existingSecret: x, minVersion: TLS10}}\n",
	} {
		if _, err := renderRaw(t, bad, renderOpts{}); err == nil {
			t.Errorf("%s rendered", strings.TrimSpace(bad))
		}
	}
}

// An upgrade keeps the key the cluster already has, found with `lookup`.
func TestGossipKeyKeptOnUpgrade(t *testing.T) {
	first := render(t, "", renderOpts{})
	second := render(t, "", renderOpts{})
	if bytes.Equal(first.secrets[0].Data["gossip-key"], second.secrets[0].Data["gossip-key"]) {
		t.Fatal("two installs generated the same key")
	}
	existing := &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: fullname + "-gossip", Namespace: namespace},
		Data:       map[string][]byte{"gossip-key": []byte("0123456789abcdef0123456789abcdef")},
	}
	up := render(t, "", renderOpts{upgrade: true, lookup: []runtime.Object{existing}})
	if got := string(up.secrets[0].Data["gossip-key"]); got != "0123456789abcdef0123456789abcdef" {
		t.Errorf("upgrade replaced the gossip key with %q", got)
	}
	_ = base64.StdEncoding // the Secret's data is decoded by the strict decoder
}

func TestRemoteWriteAuthAndTLS(t *testing.T) {
	values := `
remoteWrite:
  - url: https://mimir.example/api/v1/push
    name: mimir
    basicAuth: {username: shoal, passwordSecret: {name: mimir-auth, key: password}}
    tls:
      caSecret: {name: mimir-tls, key: ca.crt}
      certSecret: {name: mimir-tls, key: tls.crt}
      keySecret: {name: mimir-tls, key: tls.key}
      serverName: mimir.internal
    queueConfig: {max_shards: 10}
  - url: https://other.example/write
    bearerTokenSecret: {name: other-token, key: token}
    writeRelabelConfigs:
      - {source_labels: [__name__], regex: "go_.*", action: drop}
`
	r := render(t, values, renderOpts{})
	r.checkCommon()
	cfg := r.shoalConfig()
	if len(cfg.RemoteWriteConfigs) != 2 {
		t.Fatalf("want 2 remote_write entries, got %d", len(cfg.RemoteWriteConfigs))
	}
	a, b := cfg.RemoteWriteConfigs[0], cfg.RemoteWriteConfigs[1]
	hc := a.HTTPClientConfig
	if hc.BasicAuth == nil || hc.BasicAuth.Username != "shoal" || a.QueueConfig.MaxShards != 10 || hc.TLSConfig.ServerName != "mimir.internal" {
		t.Errorf("first remote write: %+v", a)
	}
	if b.HTTPClientConfig.Authorization == nil || b.HTTPClientConfig.Authorization.Type != "Bearer" || len(b.WriteRelabelConfigs) != 1 {
		t.Errorf("second remote write: %+v", b)
	}
	// Every file the configuration names is the right key of a mounted Secret.
	files := map[string]string{
		hc.BasicAuth.PasswordFile:                        "mimir-auth/password",
		hc.TLSConfig.CAFile:                              "mimir-tls/ca.crt",
		hc.TLSConfig.CertFile:                            "mimir-tls/tls.crt",
		hc.TLSConfig.KeyFile:                             "mimir-tls/tls.key",
		b.HTTPClientConfig.Authorization.CredentialsFile: "other-token/token",
	}
	for file, want := range files {
		m, ok := r.mountOf(file)
		if !ok {
			t.Errorf("%s is not mounted", file)
			continue
		}
		v := r.volume(m.Name)
		rel := strings.TrimPrefix(file, m.MountPath+"/")
		if v.Secret == nil || v.Secret.SecretName+"/"+rel != want || !m.ReadOnly {
			t.Errorf("%s comes from volume %+v, want read-only Secret key %s", file, v, want)
		}
	}
	// No secret value ends up in the ConfigMap.
	if s := r.configMap(fullname).Data["shoal.yml"]; strings.Contains(s, "password:") || strings.Contains(s, "credentials:") {
		t.Errorf("the configuration holds a secret inline:\n%s", s)
	}
	// A remote write without a URL is refused.
	if _, err := renderRaw(t, "remoteWrite: [{name: x}]\n", renderOpts{}); err == nil {
		t.Error("a remoteWrite entry without url was accepted")
	}
}

func TestMonitoringObjects(t *testing.T) {
	on := "serviceMonitor: {enabled: true}\nprometheusRule: {enabled: true}\n"
	for _, tc := range []struct {
		name       string
		values     string
		apis       []string
		wantObject bool
	}{
		{"enabled with the API", on, monitoringAPI, true},
		{"enabled without the API", on, nil, false},
		{"disabled with the API", "", monitoringAPI, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := render(t, tc.values, renderOpts{apis: tc.apis})
			r.checkCommon()
			if got := len(r.serviceMonitors) == 1 && len(r.rules) == 1; got != tc.wantObject || len(r.serviceMonitors) != len(r.rules) {
				t.Fatalf("%d ServiceMonitors and %d PrometheusRules, want them rendered: %v", len(r.serviceMonitors), len(r.rules), tc.wantObject)
			}
			if tc.values != "" && !tc.wantObject && !strings.Contains(r.notes, "API is not") {
				t.Error("NOTES.txt does not say why the monitoring objects were skipped")
			}
			if !tc.wantObject {
				return
			}
			// The ServiceMonitor selects the HTTP Service only, not the headless one.
			sm := r.serviceMonitors[0]
			for _, s := range r.services {
				selected := labelsMatch(sm.Spec.Selector.MatchLabels, s.Labels)
				if selected != (s.Name == fullname) {
					t.Errorf("ServiceMonitor selects Service %s: %v", s.Name, selected)
				}
			}
			if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "http-metrics" {
				t.Errorf("ServiceMonitor endpoints %+v", sm.Spec.Endpoints)
			}
			// The PrometheusRule carries the rules file, valid for Prometheus.
			groups, errs := rulefmt.Parse(r.rules[0].Spec, false, model.UTF8Validation, parser.NewParser(parser.Options{}), promslog.NewNopLogger())
			if len(errs) > 0 {
				t.Fatalf("PrometheusRule spec: %v", errs)
			}
			src, err := os.ReadFile("../operations/alerts/shoal.rules.yml")
			if err != nil {
				t.Fatal(err)
			}
			want, errs := rulefmt.Parse(src, false, model.UTF8Validation, parser.NewParser(parser.Options{}), promslog.NewNopLogger())
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			if fmt.Sprint(alertNames(groups)) != fmt.Sprint(alertNames(want)) {
				t.Errorf("PrometheusRule alerts %v, want %v", alertNames(groups), alertNames(want))
			}
		})
	}
}

func alertNames(g *rulefmt.RuleGroups) []string {
	var names []string
	for _, grp := range g.Groups {
		for _, r := range grp.Rules {
			names = append(names, r.Alert)
		}
	}
	return names
}

// A change of configuration changes the pods' checksum annotation (and so
// rolls them); other values do not.
func TestChecksumFollowsConfig(t *testing.T) {
	sum := func(values string) string {
		return render(t, values, renderOpts{}).pod().Annotations["checksum/config"]
	}
	base := sum("")
	if base == "" {
		t.Fatal("no checksum/config annotation")
	}
	if sum("config: {scrapeInterval: 15s}\n") == base {
		t.Error("a new scrape interval kept the checksum")
	}
	if sum("remoteWrite: [{url: 'https://x.example/write'}]\n") == base {
		t.Error("a new remote write kept the checksum")
	}
	if sum("resources: {requests: {cpu: 1, memory: 1Gi}}\n") != base {
		t.Error("a change unrelated to the configuration changed the checksum")
	}
}

// A DaemonSet: one replica per node, the WAL in an emptyDir, no cluster
// size to wait for, and pod targets scraped by the replica on their node.
func TestDaemonSet(t *testing.T) {
	r := render(t, "controller: {type: daemonset}\n", renderOpts{})
	r.checkCommon()
	if len(r.daemonSets) != 1 || len(r.statefulSets)+len(r.deployments) != 0 {
		t.Fatalf("want one DaemonSet only, got %d DaemonSets, %d StatefulSets, %d Deployments", len(r.daemonSets), len(r.statefulSets), len(r.deployments))
	}
	if m, ok := r.mountOf(r.oneFlag("storage.path")); !ok || r.volume(m.Name).EmptyDir == nil {
		t.Errorf("--storage.path=%s is not an emptyDir", r.oneFlag("storage.path"))
	}
	if r.oneFlag("cluster.wait-for-size") != "0" {
		t.Errorf("--cluster.wait-for-size=%s, want 0 (a DaemonSet's size is the node count)", r.oneFlag("cluster.wait-for-size"))
	}
	cfg := r.shoalConfig()
	for _, sc := range cfg.ScrapeConfigs {
		nodeLocal := false
		for _, rc := range sc.RelabelConfigs {
			if rc.TargetLabel == "__shoal_sharding__" && rc.Replacement == "node-local" {
				nodeLocal = true
			}
		}
		pods := sc.JobName == "shoal" || sc.JobName == "kubernetes-pods"
		if nodeLocal != pods {
			t.Errorf("job %s: node-local %v, want %v (pod targets only)", sc.JobName, nodeLocal, pods)
		}
	}
	// The other controllers keep the ring for every job.
	for _, sc := range render(t, "", renderOpts{}).shoalConfig().ScrapeConfigs {
		for _, rc := range sc.RelabelConfigs {
			if rc.TargetLabel == "__shoal_sharding__" {
				t.Errorf("StatefulSet: job %s sets __shoal_sharding__", sc.JobName)
			}
		}
	}
}

// The scaling signal: with a per-replica capacity the pods export
// shoal_replica_utilization_ratio, and the HPA scales on it beside CPU.
func TestAutoscalingOnUtilization(t *testing.T) {
	r := render(t, "capacity: {samplesPerSecond: 50000}\nautoscaling: {enabled: true, targetUtilizationRatio: \"0.7\"}\n", renderOpts{})
	r.checkCommon()
	if got := r.oneFlag("cluster.capacity.samples-per-second"); got != "50000" {
		t.Errorf("--cluster.capacity.samples-per-second=%q, want 50000", got)
	}
	if len(r.hpas) != 1 {
		t.Fatalf("want an HPA, got %d", len(r.hpas))
	}
	var cpu, util bool
	for _, m := range r.hpas[0].Spec.Metrics {
		switch {
		case m.Resource != nil && m.Resource.Name == "cpu":
			cpu = true
		case m.Pods != nil && m.Pods.Metric.Name == "shoal_replica_utilization_ratio":
			util = m.Pods.Target.AverageValue != nil && m.Pods.Target.AverageValue.String() == "700m"
		}
	}
	if !cpu || !util {
		t.Errorf("HPA metrics %+v, want CPU and shoal_replica_utilization_ratio averaging 0.7", r.hpas[0].Spec.Metrics)
	}
	// Without a capacity nothing exports the metric: refused, not an HPA
	// waiting for a metric that never comes.
	if _, err := renderRaw(t, "autoscaling: {enabled: true, targetUtilizationRatio: \"0.7\"}\n", renderOpts{}); err == nil {
		t.Error("targetUtilizationRatio without capacity.samplesPerSecond was accepted")
	}
	d := render(t, "", renderOpts{})
	if got := d.flag("cluster.capacity.samples-per-second"); len(got) != 0 {
		t.Errorf("--cluster.capacity.samples-per-second=%v rendered without a capacity", got)
	}
}

// A stopping pod has time for the whole shutdown, the hand-over included.
func TestGracePeriodCoversTheHandover(t *testing.T) {
	r := render(t, "", renderOpts{})
	var total time.Duration
	for _, f := range []string{"cluster.terminate-grace", "storage.remote.flush-deadline", "cluster.handover.timeout"} {
		d, err := time.ParseDuration(r.oneFlag(f))
		if err != nil {
			t.Fatalf("--%s: %v", f, err)
		}
		total += d
	}
	total += 5 * time.Second // leaving the cluster
	if g := r.pod().Spec.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second < total {
		t.Errorf("terminationGracePeriodSeconds %v, want at least %v", g, total)
	}
}

func TestSchemaRefusesBadValues(t *testing.T) {
	for _, v := range []string{
		"controller: {type: replicaset}\n",
		"controller: {type: daemonset}\nautoscaling: {enabled: true}\n",
		"cluster: {waitForSize: -1}\n",
		"cluster: {waitTimeout: soon}\n",
		"storage: {path: relative/dir}\n",
		"replicas: 3\n", // a typo of controller.replicas
	} {
		if _, err := renderRaw(t, v, renderOpts{}); err == nil {
			t.Errorf("values %q were accepted", v)
		}
	}
	// An explicit wait-for-size wins over the replica count, and 0 disables it.
	r := render(t, "cluster: {waitForSize: 0}\n", renderOpts{})
	if r.oneFlag("cluster.wait-for-size") != "0" {
		t.Errorf("--cluster.wait-for-size=%s, want 0", r.oneFlag("cluster.wait-for-size"))
	}
}

// Extra scrape configs join the generated ones, with the read-only rules they need.
func TestExtraScrapeConfigs(t *testing.T) {
	values := `
config:
  externalLabels: {cluster: eu-1}
  extraScrapeConfigs:
    - job_name: nodes
      kubernetes_sd_configs: [{role: node}]
rbac:
  extraRules:
    - {apiGroups: [""], resources: [nodes], verbs: [list, watch]}
`
	r := render(t, values, renderOpts{})
	r.checkCommon()
	cfg := r.shoalConfig()
	if got := jobNames(cfg); !slices.Contains(got, "nodes") || len(got) != 4 {
		t.Errorf("jobs %v, want the three defaults and nodes", got)
	}
	if cfg.GlobalConfig.ExternalLabels.Get("cluster") != "eu-1" {
		t.Errorf("external labels %v", cfg.GlobalConfig.ExternalLabels)
	}
	found := false
	for _, rule := range r.clusterRoles[0].Rules {
		found = found || slices.Equal(rule.Resources, []string{"nodes"})
	}
	if !found {
		t.Errorf("the extra rule is missing: %+v", r.clusterRoles[0].Rules)
	}
	// A whole configuration of one's own replaces the generated one.
	r = render(t, "config: {override: \"scrape_configs:\\n  - job_name: mine\\n    static_configs: [{targets: ['a:1']}]\\n\"}\n", renderOpts{})
	if got := jobNames(r.shoalConfig()); !slices.Equal(got, []string{"mine"}) {
		t.Errorf("override: jobs %v, want [mine]", got)
	}
}

func TestMonitors(t *testing.T) {
	// Off by default: no flag, no access to monitors or Secrets.
	r := render(t, "", renderOpts{})
	if v := r.flag("kubernetes.monitors"); len(v) != 0 {
		t.Errorf("--kubernetes.monitors set by default: %v", v)
	}
	for _, cr := range r.clusterRoles {
		for _, rule := range cr.Rules {
			if slices.Contains(rule.Resources, "secrets") || slices.Contains(rule.APIGroups, "monitoring.coreos.com") {
				t.Errorf("default RBAC grants %v on %v", rule.Verbs, rule.Resources)
			}
		}
	}

	r = render(t, "monitors: {enabled: true, selector: 'team=obs', excludeNamespaces: [kube-system]}\nconfig: {scrapeSelf: false, scrapeAnnotatedPods: false, scrapeAnnotatedServices: false}\n", renderOpts{})
	r.checkCommon()
	if r.oneFlag("kubernetes.monitors") != "true" || r.oneFlag("kubernetes.monitors.selector") != "team=obs" ||
		r.oneFlag("kubernetes.monitors.exclude-namespaces") != "kube-system" || len(r.flag("kubernetes.monitors.namespaces")) != 0 {
		t.Errorf("monitor flags: %v", r.container().Args)
	}
	if len(r.clusterRoles) != 1 {
		t.Fatalf("want one ClusterRole for monitors alone, got %d", len(r.clusterRoles))
	}
	grants := map[string][]string{}
	for _, rule := range r.clusterRoles[0].Rules {
		for _, g := range rule.APIGroups {
			for _, res := range rule.Resources {
				grants[g+"/"+res] = rule.Verbs
			}
		}
	}
	for _, res := range []string{"monitoring.coreos.com/servicemonitors", "monitoring.coreos.com/podmonitors", "monitoring.coreos.com/probes", "monitoring.coreos.com/scrapeconfigs", "/pods", "/services", "/endpoints", "discovery.k8s.io/endpointslices"} {
		if !slices.Equal(grants[res], []string{"get", "list", "watch"}) {
			t.Errorf("%s: verbs %v, want get, list, watch", res, grants[res])
		}
	}
	for _, res := range []string{"/secrets", "/configmaps"} {
		if !slices.Equal(grants[res], []string{"get"}) {
			t.Errorf("%s: verbs %v, want get alone (the monitors' references are read one by one)", res, grants[res])
		}
	}

	// Namespaced RBAC: the watch stays in the namespace the Role covers.
	r = render(t, "monitors: {enabled: true}\nrbac: {namespaced: true}\n", renderOpts{})
	if got := r.flag("kubernetes.monitors.namespaces"); !slices.Equal(got, []string{namespace}) {
		t.Errorf("--kubernetes.monitors.namespaces = %v with rbac.namespaced, want [%s]", got, namespace)
	}
	if _, err := renderRaw(t, "monitors: {enabled: true, namespaces: ['']}\n", renderOpts{}); err == nil {
		t.Error("an empty namespace name was accepted")
	}
}

// TestImageTagPicksTheFullImageForAllDiscoveries: the default image is
// the appVersion; image.allDiscoveries picks the -full one; an explicit
// tag wins over both.
func TestImageTagPicksTheFullImageForAllDiscoveries(t *testing.T) {
	for _, c := range []struct{ values, want string }{
		{"", "ghcr.io/shoal-dev/shoal:0.1.0"},
		{"image: {allDiscoveries: true}", "ghcr.io/shoal-dev/shoal:0.1.0-full"},
		{"image: {allDiscoveries: true, tag: v9}", "ghcr.io/shoal-dev/shoal:v9"},
	} {
		if got := render(t, c.values, renderOpts{}).container().Image; got != c.want {
			t.Errorf("values %q: image %q, want %q", c.values, got, c.want)
		}
	}
}
