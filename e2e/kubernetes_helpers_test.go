package e2e

// Helpers of the tests against a real Kubernetes API server
// (kubernetes_test.go): the chart installed with the Helm SDK, and the
// kubelet's part played by the test — pods created from the chart's own
// workload, their status set through the status subresource, and real shoal
// processes started with the container's arguments, the ConfigMap and the
// Secret as they are stored in the API server.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/strvals"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/shoal-dev/shoal/internal/k8stest"
)

// kube is one control plane with the clients the tests use.
type kube struct {
	t     *testing.T
	cp    *k8stest.ControlPlane
	dyn   dynamic.Interface
	rm    meta.RESTMapper
	admin string // the administrator's kubeconfig file, for Helm
	chart *chart.Chart
}

func startKube(t *testing.T) *kube {
	t.Helper()
	needBinary(t)
	cp := k8stest.StartForTest(t)
	dyn, err := dynamic.NewForConfig(cp.Config)
	if err != nil {
		fatal(t, err)
	}
	admin := filepath.Join(t.TempDir(), "admin.kubeconfig")
	if err := cp.WriteAdminKubeconfig(admin, ""); err != nil {
		fatal(t, err)
	}
	ch, err := loader.Load(filepath.Join("..", "charts", "shoal"))
	if err != nil {
		fatal(t, err)
	}
	return &kube{
		t:     t,
		cp:    cp,
		dyn:   dyn,
		rm:    restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(cp.Client.Discovery())),
		admin: admin,
		chart: ch,
	}
}

func (k *kube) namespace(name string) {
	k.t.Helper()
	if err := k.cp.CreateNamespace(k.t.Context(), name); err != nil {
		fatal(k.t, err)
	}
}

// helm returns a Helm action configuration for namespace (release records in
// Secrets, as the helm CLI keeps them).
func (k *kube) helm(namespace string) *action.Configuration {
	k.t.Helper()
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = &k.admin
	flags.Namespace = &namespace
	cfg := new(action.Configuration)
	if err := cfg.Init(flags, namespace, "secret", func(string, ...any) {}); err != nil {
		fatal(k.t, err)
	}
	return cfg
}

// values parses helm --set style assignments.
func values(t testing.TB, sets ...string) map[string]any {
	t.Helper()
	v := map[string]any{}
	for _, s := range sets {
		if err := strvals.ParseInto(s, v); err != nil {
			fatalf(t, "--set %s: %v", s, err)
		}
	}
	return v
}

func (k *kube) install(namespace, name string, vals map[string]any) *release.Release {
	k.t.Helper()
	in := action.NewInstall(k.helm(namespace))
	in.Namespace, in.ReleaseName = namespace, name
	in.Timeout = 2 * time.Minute
	rel, err := in.RunWithContext(k.t.Context(), k.chart, vals)
	if err != nil {
		fatalf(k.t, "helm install %s in %s: %v", name, namespace, err)
	}
	return rel
}

func (k *kube) upgrade(namespace, name string, vals map[string]any) *release.Release {
	k.t.Helper()
	up := action.NewUpgrade(k.helm(namespace))
	up.Namespace = namespace
	up.Timeout = 2 * time.Minute
	rel, err := up.RunWithContext(k.t.Context(), name, k.chart, vals)
	if err != nil {
		fatalf(k.t, "helm upgrade %s in %s: %v", name, namespace, err)
	}
	return rel
}

func (k *kube) uninstall(namespace, name string) {
	k.t.Helper()
	un := action.NewUninstall(k.helm(namespace))
	un.Timeout = 2 * time.Minute
	if _, err := un.Run(name); err != nil {
		fatalf(k.t, "helm uninstall %s in %s: %v", name, namespace, err)
	}
}

// objects decodes a release manifest.
func objects(t testing.TB, manifest string) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for doc := range strings.SplitSeq(manifest, "\n---") {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			fatalf(t, "manifest: %v\n%s", err, doc)
		}
		if len(m) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
	return out
}

func (k *kube) resource(u *unstructured.Unstructured) dynamic.ResourceInterface {
	k.t.Helper()
	gvk := u.GroupVersionKind()
	m, err := k.rm.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		fatalf(k.t, "%s: %v", gvk, err)
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		return k.dyn.Resource(m.Resource).Namespace(u.GetNamespace())
	}
	return k.dyn.Resource(m.Resource)
}

// strictApply applies every object server-side as a dry run with strict
// field validation: an unknown or duplicated field is an error, as well as
// anything the API server's validation refuses.
func (k *kube) strictApply(objs []*unstructured.Unstructured) {
	k.t.Helper()
	for _, u := range objs {
		data, err := u.MarshalJSON()
		if err != nil {
			fatal(k.t, err)
		}
		force := true
		_, err = k.resource(u).Patch(k.t.Context(), u.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{
			DryRun:          []string{metav1.DryRunAll},
			FieldManager:    "shoal-e2e",
			Force:           &force,
			FieldValidation: metav1.FieldValidationStrict,
		})
		if err != nil {
			errorf(k.t, "server-side validation of %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
}

// exists reports whether the object is in the API server.
func (k *kube) exists(u *unstructured.Unstructured) bool {
	k.t.Helper()
	_, err := k.resource(u).Get(k.t.Context(), u.GetName(), metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		fatalf(k.t, "%s %s: %v", u.GetKind(), u.GetName(), err)
	}
	return err == nil
}

// ---------------------------------------------------------------------------
// The kubelet's part

// loopbackBlock returns a 127.x.y prefix unlikely to be used by the other
// e2e tests (they use 127.0.0.x) or by another test binary running now.
func loopbackBlock() string {
	return fmt.Sprintf("127.%d.%d", 100+os.Getpid()%100, 1+(os.Getpid()/100)%250)
}

// commonFreePort returns a port free for TCP and UDP on every ip: pods share
// their container ports, each on its own pod IP.
func commonFreePort(t testing.TB, ips ...string) int {
	t.Helper()
	for range 100 {
		p := freePort(t, ips[0])
		ok := true
		for _, ip := range ips[1:] {
			addr := net.JoinHostPort(ip, strconv.Itoa(p))
			l, err := net.Listen("tcp", addr)
			if err != nil {
				ok = false
				break
			}
			u, err := net.ListenPacket("udp", addr)
			l.Close()
			if err != nil {
				ok = false
				break
			}
			u.Close()
		}
		if ok {
			return p
		}
	}
	fatalf(t, "no port free on all of %v", ips)
	return 0
}

// startTargetAt starts a target (see targets_test.go) listening on addr.
func startTargetAt(t testing.TB, addr string) *target {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fatal(t, err)
	}
	tg := &target{addr: addr}
	srv := &http.Server{Handler: tg, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return tg
}

// createPod creates a pod and, as the kubelet does once its containers run,
// sets phase Running, Ready and the pod IP through the status subresource.
func (k *kube) createPod(pod *corev1.Pod, ip string) *corev1.Pod {
	k.t.Helper()
	ctx := k.t.Context()
	created, err := k.cp.Client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		fatalf(k.t, "creating pod %s/%s: %v", pod.Namespace, pod.Name, err)
	}
	if ip == "" {
		return created
	}
	return k.setRunning(created, ip)
}

func (k *kube) setRunning(pod *corev1.Pod, ip string) *corev1.Pod {
	k.t.Helper()
	now := metav1.Now()
	pod.Status = corev1.PodStatus{
		Phase:     corev1.PodRunning,
		PodIP:     ip,
		PodIPs:    []corev1.PodIP{{IP: ip}},
		HostIP:    ip,
		StartTime: &now,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		},
	}
	for _, c := range pod.Spec.Containers {
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, Ready: true,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	updated, err := k.cp.Client.CoreV1().Pods(pod.Namespace).UpdateStatus(k.t.Context(), pod, metav1.UpdateOptions{})
	if err != nil {
		fatalf(k.t, "pod %s/%s status: %v", pod.Namespace, pod.Name, err)
	}
	return updated
}

func (k *kube) deletePod(namespace, name string) {
	k.t.Helper()
	if err := k.cp.Client.CoreV1().Pods(namespace).Delete(k.t.Context(), name, metav1.DeleteOptions{}); err != nil {
		fatalf(k.t, "deleting pod %s/%s: %v", namespace, name, err)
	}
}

// targetPod is a pod annotated for the chart's kubernetes-pods job.
func targetPod(namespace, name string, port int) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: namespace,
			Labels: map[string]string{"app": "demo"},
			Annotations: map[string]string{
				"prometheus.io/scrape": "true",
				"prometheus.io/port":   strconv.Itoa(port),
			},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "demo", Image: "example.invalid/demo"}}},
	}
}

// shoalWorkload is the chart's StatefulSet or Deployment as stored in the
// API server: the pod template and what the kubelet needs from it.
type shoalWorkload struct {
	namespace   string
	template    corev1.PodTemplateSpec
	statefulSet bool
	fullname    string
}

func (k *kube) workload(namespace, fullname string) shoalWorkload {
	k.t.Helper()
	ctx := k.t.Context()
	if sts, err := k.cp.Client.AppsV1().StatefulSets(namespace).Get(ctx, fullname, metav1.GetOptions{}); err == nil {
		return shoalWorkload{namespace: namespace, template: sts.Spec.Template, statefulSet: true, fullname: fullname}
	} else if !apierrors.IsNotFound(err) {
		fatal(k.t, err)
	}
	if ds, err := k.cp.Client.AppsV1().DaemonSets(namespace).Get(ctx, fullname, metav1.GetOptions{}); err == nil {
		return shoalWorkload{namespace: namespace, template: ds.Spec.Template, fullname: fullname}
	} else if !apierrors.IsNotFound(err) {
		fatal(k.t, err)
	}
	dep, err := k.cp.Client.AppsV1().Deployments(namespace).Get(ctx, fullname, metav1.GetOptions{})
	if err != nil {
		fatalf(k.t, "the chart's workload %s/%s: %v", namespace, fullname, err)
	}
	return shoalWorkload{namespace: namespace, template: dep.Spec.Template, fullname: fullname}
}

func (w shoalWorkload) container(t testing.TB) corev1.Container {
	t.Helper()
	for _, c := range w.template.Spec.Containers {
		if c.Name == "shoal" {
			return c
		}
	}
	fatal(t, "no container named shoal in the chart's pod template")
	return corev1.Container{}
}

// pod is the pod the StatefulSet (or ReplicaSet) controller would create.
func (w shoalWorkload) pod(name string) *corev1.Pod {
	spec := *w.template.Spec.DeepCopy()
	if w.statefulSet {
		// The StatefulSet controller adds the claim of each volumeClaimTemplate.
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "storage", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "storage-" + name},
		}})
		spec.Hostname, spec.Subdomain = name, w.fullname+"-cluster"
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: w.namespace,
			Labels:      w.template.Labels,
			Annotations: w.template.Annotations,
		},
		Spec: spec,
	}
}

// selector is the label selector of the chart's pods.
func (w shoalWorkload) selector() string {
	var parts []string
	for _, k := range sortedKeys(w.template.Labels) {
		if strings.HasPrefix(k, "app.kubernetes.io/") {
			parts = append(parts, k+"="+w.template.Labels[k])
		}
	}
	return strings.Join(parts, ",")
}

func containerPort(t testing.TB, c corev1.Container, name string) int {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return int(p.ContainerPort)
		}
	}
	fatalf(t, "container %s has no port named %s", c.Name, name)
	return 0
}

// podFiles writes what the kubelet would mount into one pod: the
// configuration from the ConfigMap (each kubernetes_sd_config given the
// kubeconfig, where a pod has its service-account token instead) and the
// gossip key from the Secret, both read from the API server. It returns a
// map from mount path to directory on disk.
func (k *kube) podFiles(w shoalWorkload, dir, kubeconfig string) map[string]string {
	k.t.Helper()
	ctx := k.t.Context()
	c := w.container(k.t)
	mounts := map[string]string{}
	vols := map[string]corev1.Volume{}
	for _, v := range w.template.Spec.Volumes {
		vols[v.Name] = v
	}
	for _, m := range c.VolumeMounts {
		v, ok := vols[m.Name]
		local := filepath.Join(dir, m.Name)
		if err := os.MkdirAll(local, 0o700); err != nil {
			fatal(k.t, err)
		}
		mounts[m.MountPath] = local
		switch {
		case !ok:
			// The StatefulSet's claim: an empty directory that outlives the pod.
		case v.ConfigMap != nil:
			cm, err := k.cp.Client.CoreV1().ConfigMaps(w.namespace).Get(ctx, v.ConfigMap.Name, metav1.GetOptions{})
			if err != nil {
				fatal(k.t, err)
			}
			for key, data := range cm.Data {
				if key == "shoal.yml" {
					data = withKubeconfig(k.t, data, kubeconfig)
				}
				writeFile(k.t, filepath.Join(local, key), data)
			}
		case v.Secret != nil:
			sec, err := k.cp.Client.CoreV1().Secrets(w.namespace).Get(ctx, v.Secret.SecretName, metav1.GetOptions{})
			if err != nil {
				fatal(k.t, err)
			}
			for _, it := range v.Secret.Items {
				writeFile(k.t, filepath.Join(local, it.Path), string(sec.Data[it.Key]))
			}
		}
	}
	return mounts
}

// withKubeconfig adds kubeconfig_file to every kubernetes_sd_configs entry:
// outside a pod there is no in-cluster service-account token.
func withKubeconfig(t testing.TB, cfg, kubeconfig string) string {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal([]byte(cfg), &m); err != nil {
		fatalf(t, "the chart's shoal.yml: %v", err)
	}
	scs, _ := m["scrape_configs"].([]any)
	for _, sc := range scs {
		for _, sd := range sc.(map[string]any)["kubernetes_sd_configs"].([]any) {
			sd.(map[string]any)["kubeconfig_file"] = kubeconfig
		}
	}
	out, err := yaml.Marshal(m)
	if err != nil {
		fatal(t, err)
	}
	return string(out)
}

// shoalPod is one replica: its pod object and its process.
type shoalPod struct {
	name string
	ip   string
	*agent
}

// startShoalPod plays the kubelet for one replica: it creates the pod from
// the chart's template, gets a token of the pod's ServiceAccount from the
// TokenRequest API, writes the mounted files, and starts shoal with the
// container's arguments, environment references resolved as the kubelet
// resolves them. Only what cannot work outside a pod is changed: listen
// addresses bind the pod IP instead of every interface; mount paths are
// directories on disk; and --cluster.join, the headless Service's DNS name
// (no cluster DNS here), becomes --cluster.kubernetes.label-selector with
// --cluster.kubernetes.kubeconfig. The pod is marked Running when the process starts.
func (k *kube) startShoalPod(w shoalWorkload, name, ip, storageDir string) *shoalPod {
	k.t.Helper()
	ctx := k.t.Context()
	c := w.container(k.t)
	pod := k.createPod(w.pod(name), "")
	token, err := k.cp.Token(ctx, w.namespace, pod.Spec.ServiceAccountName, time.Hour)
	if err != nil {
		fatal(k.t, err)
	}
	dir := k.t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := k.cp.WriteKubeconfig(kubeconfig, token, w.namespace); err != nil {
		fatal(k.t, err)
	}
	mounts := k.podFiles(w, dir, kubeconfig)
	env := map[string]string{"POD_NAME": name, "POD_IP": ip}
	var args []string
	var configFile, storage, webAddr, gossipAddr string
	for _, a := range c.Args {
		for k, v := range env {
			a = strings.ReplaceAll(a, "$("+k+")", v)
		}
		flag, val, _ := strings.Cut(a, "=")
		for mp, local := range mounts {
			if val == mp || strings.HasPrefix(val, mp+"/") {
				val = local + strings.TrimPrefix(val, mp)
			}
		}
		switch flag {
		case "--config.file":
			configFile = val
			continue
		case "--storage.path":
			storage = val
			continue
		case "--web.listen-address":
			_, port, _ := net.SplitHostPort(val)
			webAddr = net.JoinHostPort(ip, port)
			continue
		case "--cluster.node-name":
			if val != name {
				fatalf(k.t, "--cluster.node-name=%s, want the pod name %s", val, name)
			}
			continue
		case "--cluster.listen-address":
			_, port, _ := net.SplitHostPort(val)
			gossipAddr = net.JoinHostPort(ip, port)
			val = gossipAddr
		case "--cluster.join":
			args = append(args,
				"--cluster.kubernetes.label-selector="+w.selector(),
				"--cluster.kubernetes.kubeconfig="+kubeconfig)
			continue
		}
		if val != "" || strings.Contains(a, "=") {
			args = append(args, flag+"="+val)
		} else {
			args = append(args, flag)
		}
	}
	if storageDir != "" {
		storage = storageDir
	}
	a := newAgent(k.t, agentSpec{name: name, ip: ip, config: configFile, extraArgs: args})
	a.webAddr, a.gossipAddr, a.storage = webAddr, gossipAddr, storage
	a.start()
	k.setRunning(pod, ip)
	return &shoalPod{name: name, ip: ip, agent: a}
}

// probe answers a container's HTTP probe as the kubelet would: GET on the
// pod IP at the probe's path and port (a port name resolved against the
// container), success for a status from 200 to 399.
func probe(t testing.TB, p *corev1.Probe, c corev1.Container, ip string) (bool, string) {
	t.Helper()
	if p == nil || p.HTTPGet == nil {
		fatalf(t, "container %s: no HTTP probe", c.Name)
	}
	port := p.HTTPGet.Port.IntValue()
	if p.HTTPGet.Port.StrVal != "" {
		port = containerPort(t, c, p.HTTPGet.Port.StrVal)
	}
	timeout := time.Duration(max(p.TimeoutSeconds, 1)) * time.Second
	scheme := strings.ToLower(string(p.HTTPGet.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s://%s%s", scheme, net.JoinHostPort(ip, strconv.Itoa(port)), p.HTTPGet.Path), nil)
	if err != nil {
		fatal(t, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	return resp.StatusCode >= 200 && resp.StatusCode < 400, fmt.Sprintf("%s: %s", resp.Status, bytes.TrimSpace(body))
}
