package e2e

// Tests against a real Kubernetes API server (internal/k8stest: etcd and
// kube-apiserver, RBAC on, no controller-manager, scheduler or kubelet).
// `make test-k8s` runs them (names TestKubernetes*); `make test-e2e` skips
// them, and without the binaries they skip outside CI.

import (
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shoal-dev/shoal/internal/testutil"
)

const releaseName = "obs"

// TestKubernetesChart installs the chart for a small matrix of values: every
// object is accepted by the API server (and by a strict server-side dry-run
// apply, which refuses unknown fields), an upgrade keeps the gossip key, and
// uninstall leaves none of the release's objects.
func TestKubernetesChart(t *testing.T) {
	k := startKube(t)
	for i, tc := range []struct {
		name string
		sets []string
	}{
		{"defaults", nil},
		{"deployment", []string{"controller.type=deployment"}},
		{"namespaced", []string{"rbac.namespaced=true"}},
		{"daemonset", []string{"controller.type=daemonset"}},
		{"deployment-namespaced-autoscaling", []string{"controller.type=deployment,rbac.namespaced=true,autoscaling.enabled=true,config.scrapeAnnotatedServices=false"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent := k.t
			k.t = t
			defer func() { k.t = parent }()
			ns := fmt.Sprintf("chart-%d", i)
			k.namespace(ns)
			vals := values(t, tc.sets...)
			rel := k.install(ns, releaseName, vals)
			objs := objects(t, rel.Manifest)
			var kinds []string
			for _, o := range objs {
				kinds = append(kinds, o.GetKind())
				if !k.exists(o) {
					errorf(t, "%s %s not in the API server after install", o.GetKind(), o.GetName())
				}
			}
			t.Logf("installed %d objects: %s", len(objs), strings.Join(kinds, ", "))
			k.strictApply(objs)

			secrets := k.cp.Client.CoreV1().Secrets(ns)
			gossip := releaseName + "-shoal-gossip"
			before, err := secrets.Get(t.Context(), gossip, metav1.GetOptions{})
			if err != nil {
				fatalf(t, "gossip key Secret: %v", err)
			}
			if n := len(before.Data["gossip-key"]); n != 16 && n != 24 && n != 32 {
				errorf(t, "gossip key is %d bytes, want 16, 24 or 32", n)
			}
			up := values(t, append(slices.Clone(tc.sets), "logLevel=debug")...)
			rel2 := k.upgrade(ns, releaseName, up)
			if rel2.Version != 2 {
				errorf(t, "release version %d after upgrade, want 2", rel2.Version)
			}
			after, err := secrets.Get(t.Context(), gossip, metav1.GetOptions{})
			if err != nil {
				fatalf(t, "gossip key Secret after upgrade: %v", err)
			}
			if string(after.Data["gossip-key"]) != string(before.Data["gossip-key"]) {
				fail(t, "upgrade replaced the gossip key; a rollout would split the cluster")
			}
			w := k.workload(ns, releaseName+"-shoal")
			if !slices.Contains(w.container(t).Args, "--log.level=debug") {
				errorf(t, "upgrade did not reach the workload: args %v", w.container(t).Args)
			}

			k.uninstall(ns, releaseName)
			for _, o := range objects(t, rel2.Manifest) {
				if k.exists(o) {
					errorf(t, "%s %s still there after uninstall", o.GetKind(), o.GetName())
				}
			}
			left, err := secrets.List(t.Context(), metav1.ListOptions{})
			if err != nil {
				fatal(t, err)
			}
			for _, s := range left.Items {
				errorf(t, "Secret %s left after uninstall (labels %v)", s.Name, s.Labels)
			}
			// What the chart's docs say stays: the WAL claims of a StatefulSet,
			// which its controller creates (none here: no controller runs).
			pvcs, err := k.cp.Client.CoreV1().PersistentVolumeClaims(ns).List(t.Context(), metav1.ListOptions{})
			if err != nil {
				fatal(t, err)
			}
			if len(pvcs.Items) != 0 {
				errorf(t, "%d PersistentVolumeClaims, want none without a StatefulSet controller", len(pvcs.Items))
			}
		})
	}
}

// TestKubernetesChartTwoNamespaces installs the same release name in two
// namespaces with the default (cluster-wide) RBAC: the cluster-scoped
// objects of one must not collide with those of the other.
func TestKubernetesChartTwoNamespaces(t *testing.T) {
	k := startKube(t)
	for _, ns := range []string{"team-a", "team-b"} {
		k.namespace(ns)
		k.install(ns, releaseName, values(t))
	}
	for _, ns := range []string{"team-a", "team-b"} {
		k.uninstall(ns, releaseName)
	}
}

// kubeTargets are the scrape targets of TestKubernetesCluster: pods annotated
// for the chart's kubernetes-pods job (role pod) and the endpoints of an
// annotated Service (role endpointslice), each a real server on its pod IP.
type kubeTargets struct {
	k     *kube
	ns    string
	block string
	port  int
	pods  map[string]*target // by pod name
	web   []*target          // behind the Service
}

func (kt *kubeTargets) addPod(name string, host int) {
	ip := fmt.Sprintf("%s.%d", kt.block, host)
	kt.pods[name] = startTargetAt(kt.k.t, fmt.Sprintf("%s:%d", ip, kt.port))
	kt.k.createPod(targetPod(kt.ns, name, kt.port), ip)
}

// addServices creates n annotated Services and, as the EndpointSlice
// controller would, an EndpointSlice for each with one ready endpoint, a
// running pod. The API server refuses loopback addresses in EndpointSlices,
// so these targets listen on testutil.NetnsIPv4, each on its port: the test
// must run in its own network namespace (testutil.InOwnNetns), never on the
// machine's own address.
func (kt *kubeTargets) addServices(n int) {
	t, ctx := kt.k.t, kt.k.t.Context()
	ip := testutil.NetnsIPv4
	ready, portName := true, "http"
	for i := range n {
		name := fmt.Sprintf("web-%d", i)
		port := freePort(t, ip)
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: kt.ns, Annotations: map[string]string{
				"prometheus.io/scrape": "true",
				"prometheus.io/port":   strconv.Itoa(port),
			}},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: portName, Port: 80}}},
		}
		if _, err := kt.k.cp.Client.CoreV1().Services(kt.ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			fatalf(t, "creating Service: %v", err)
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-pod", Namespace: kt.ns, Labels: map[string]string{"app": name}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "example.invalid/web"}}},
		}
		kt.k.createPod(pod, ip)
		kt.web = append(kt.web, startTargetAt(t, net.JoinHostPort(ip, strconv.Itoa(port))))
		p32 := int32(port)
		slice := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: name + "-1", Namespace: kt.ns, Labels: map[string]string{discoveryv1.LabelServiceName: name}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: &portName, Port: &p32}},
			Endpoints: []discoveryv1.Endpoint{{
				Addresses:  []string{ip},
				Conditions: discoveryv1.EndpointConditions{Ready: &ready},
				TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: kt.ns, Name: pod.Name},
			}},
		}
		if _, err := kt.k.cp.Client.DiscoveryV1().EndpointSlices(kt.ns).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
			fatalf(t, "creating EndpointSlice: %v", err)
		}
	}
}

// all returns every scraped target, the replicas' own /metrics included.
func (kt *kubeTargets) all(replicas []*shoalPod) []*target {
	var out []*target
	for _, n := range sortedKeys(kt.pods) {
		out = append(out, kt.pods[n])
	}
	out = append(out, kt.web...)
	for _, r := range replicas {
		out = append(out, &target{addr: r.webAddr})
	}
	return out
}

func (kt *kubeTargets) served() []*target {
	return kt.all(nil)
}

func agentsOf(rs []*shoalPod) []*agent {
	out := make([]*agent, len(rs))
	for i, r := range rs {
		out[i] = r.agent
	}
	return out
}

// TestKubernetesCluster installs the chart into a real API server and plays
// the kubelet for three replicas: real shoal processes with the chart's
// arguments and exactly the chart's RBAC (a TokenRequest token of its
// ServiceAccount) find each other through the API, discover their targets
// with kubernetes_sd_configs (roles pod and endpointslice) and scrape each
// exactly once into a real TSDB; pods deleted and added through the API move
// targets and peers; the chart's probes answer as they must while starting,
// waiting for peers, replaying the WAL and terminating.
func TestKubernetesCluster(t *testing.T) {
	if !testutil.InOwnNetns(t) { // for addServices
		return
	}
	k := startKube(t)
	const ns, apps = "monitoring", "apps"
	k.namespace(ns)
	k.namespace(apps)
	recv := startReceiver(t)

	block := loopbackBlock()
	ips := make([]string, 4)
	for i := range ips {
		ips[i] = fmt.Sprintf("%s.%d", block, i+1)
	}
	webPort := commonFreePort(t, ips...)
	gossipPort := commonFreePort(t, ips...)
	for gossipPort == webPort {
		gossipPort = commonFreePort(t, ips...)
	}
	k.install(ns, releaseName, values(t,
		"config.scrapeInterval=1s,config.scrapeTimeout=1s",
		"web.port="+strconv.Itoa(webPort),
		"cluster.port="+strconv.Itoa(gossipPort),
		"remoteWrite[0].url="+recv.writeURL(),
	))
	w := k.workload(ns, releaseName+"-shoal")
	c := w.container(t)
	if c.ReadinessProbe == nil || c.LivenessProbe == nil {
		fatal(t, "the chart's container has no readiness or liveness probe")
	}
	ready := func(r *shoalPod) (bool, string) { return probe(t, c.ReadinessProbe, c, r.ip) }
	live := func(r *shoalPod) (bool, string) { return probe(t, c.LivenessProbe, c, r.ip) }

	kt := &kubeTargets{k: k, ns: apps, block: block, port: commonFreePort(t, block+".11", block+".12", block+".13", block+".14"), pods: map[string]*target{}}
	for i := 1; i <= 3; i++ {
		kt.addPod(fmt.Sprintf("demo-%d", i), 10+i)
	}
	kt.addServices(2)

	// The first replica alone: alive, not ready (--cluster.wait-for-size is
	// the replica count), and scraping nothing.
	r0 := k.startShoalPod(w, releaseName+"-shoal-0", ips[0], "")
	r0.waitHTTP(startTimeout)
	testutil.Eventually(t, startTimeout, "first replica alive and waiting for its peers", func() error {
		if ok, why := live(r0); !ok {
			return fmt.Errorf("liveness: %s", why)
		}
		if ok, why := ready(r0); ok || !strings.Contains(why, "waiting for 3 cluster members") {
			return fmt.Errorf("readiness: ready=%v %s", ok, why)
		}
		return nil
	})
	replicas := []*shoalPod{r0}
	for i := 1; i < 3; i++ {
		replicas = append(replicas, k.startShoalPod(w, fmt.Sprintf("%s-shoal-%d", releaseName, i), ips[i], ""))
	}
	for _, r := range replicas {
		testutil.Eventually(t, convergeTimeout, r.name+" ready by the chart's readiness probe", func() error {
			if err := r.exitedEarly(); err != nil {
				fatal(t, err)
			}
			if ok, why := ready(r); !ok {
				return fmt.Errorf("%s", why)
			}
			return nil
		})
	}
	waitConverged(t, agentsOf(replicas), kt.all(replicas))
	t0 := time.Now()
	waitServed(t, kt.served(), t0, 3, convergeTimeout)
	waitReceiverCaughtUp(t, recv, kt.served(), t0)
	checkNoHoles(t, recv, kt.served())

	// A target pod deleted stops being scraped; one added is scraped once.
	gone := kt.pods["demo-3"]
	k.deletePod(apps, "demo-3")
	delete(kt.pods, "demo-3")
	kt.addPod("demo-4", 14)
	waitConverged(t, agentsOf(replicas), kt.all(replicas))
	stopped := gone.count()
	waitServed(t, kt.served(), time.Now(), 3, convergeTimeout)
	if n := gone.count(); n != stopped {
		errorf(t, "deleted pod's target scraped %d more times after every replica dropped it", n-stopped)
	}

	// A replica's pod deleted: the kubelet sends SIGTERM. From the moment it
	// says so, the readiness probe fails until the process is gone, and the
	// two left take over its targets.
	leaving := replicas[2]
	k.deletePod(ns, leaving.name)
	leaving.signal(syscall.SIGTERM)
	var answers []string
	notReadyAt := -1
	for leaving.running() {
		ok, why := ready(leaving)
		if !leaving.running() {
			break
		}
		if !ok && notReadyAt < 0 && strings.Contains(why, "shutting down") {
			notReadyAt = len(answers)
		}
		answers = append(answers, fmt.Sprintf("ready=%v %s", ok, why))
		time.Sleep(20 * time.Millisecond)
	}
	if err := leaving.waitExit(stopTimeout); err != nil {
		errorf(t, "%s: SIGTERM: exit %v, want status 0", leaving.name, err)
	}
	if notReadyAt < 0 {
		errorf(t, "readiness probe never said shutting down between SIGTERM and exit: %v", answers)
	} else {
		for _, a := range answers[notReadyAt:] {
			if strings.HasPrefix(a, "ready=true") {
				errorf(t, "ready again while terminating: %v", answers)
				break
			}
		}
	}
	t.Logf("readiness while terminating (%d probes): first %q", len(answers), answers[0])
	replicas = replicas[:2]
	waitConverged(t, agentsOf(replicas), kt.all(replicas))

	// The StatefulSet controller recreates the pod with the same name and
	// claim, and it gets a new IP. Its peers are found through the API
	// again; it is not ready before its WAL is replayed.
	rejoinStart := time.Now()
	back := k.startShoalPod(w, leaving.name, ips[3], leaving.storage)
	var firstReady string
	testutil.Eventually(t, convergeTimeout, back.name+" ready again", func() error {
		if err := back.exitedEarly(); err != nil {
			fatal(t, err)
		}
		ok, why := ready(back)
		if !ok {
			return fmt.Errorf("%s", why)
		}
		logData, err := os.ReadFile(back.logPath)
		if err != nil {
			return err
		}
		firstReady = string(logData)
		return nil
	})
	if !strings.Contains(firstReady, "WAL replay completed") {
		errorf(t, "%s ready before its log says the WAL replay completed", back.name)
	}
	replicas = append(replicas, back)
	waitConverged(t, agentsOf(replicas), kt.all(replicas))
	t.Logf("recreated replica with a new IP ready and converged %v after start", time.Since(rejoinStart).Round(time.Millisecond))

	t1 := time.Now()
	waitServed(t, kt.served(), t1, 3, convergeTimeout)
	waitReceiverCaughtUp(t, recv, kt.served(), t1)
	recv.checkNoRejections(t)
	ss, err := recv.seriesOf(counterMetric)
	if err != nil {
		fatal(t, err)
	}
	// A moved target gets no staleness marker (its new owner continues the
	// series); a target whose pod is gone does, as in Prometheus.
	var kept []series
	for _, x := range ss {
		if x.labels.Get("instance") != gone.addr {
			kept = append(kept, x)
		} else if n := len(x.samples); n == 0 || !x.samples[n-1].IsStale() {
			errorf(t, "series of the deleted pod's target does not end with a staleness marker: %s", x.labels)
		}
	}
	if err := checkSeriesClean(kept); err != nil {
		fail(t, err)
	}
	if _, err := recv.counterValues(); err != nil {
		fail(t, err)
	}
}

// checkNoHoles requires every scrape each target served to be in the
// receiver: a target scraped by two replicas would show values missing from
// each series (or refusals), one scraped by none no values at all.
func checkNoHoles(t *testing.T, recv *testReceiver, targets []*target) {
	t.Helper()
	vals, err := recv.counterValues()
	if err != nil {
		fatal(t, err)
	}
	for _, tg := range targets {
		ss := vals[tg.addr]
		missing, err := missingValues(ss, maxValue(ss))
		if err != nil {
			errorf(t, "%s: %v", tg.addr, err)
		} else if len(missing) > 0 || len(ss) == 0 {
			errorf(t, "%s: %d samples, values missing %v", tg.addr, len(ss), missing)
		}
	}
	recv.checkNoRejections(t)
}

// TestKubernetesRBACMissingVerb takes one verb away from the chart's Role:
// shoal must say, in its log, metrics, status page and API, that the API
// server forbids it, and recover once the Role is whole again.
func TestKubernetesRBACMissingVerb(t *testing.T) {
	k := startKube(t)
	const ns = "rbac"
	k.namespace(ns)
	block := loopbackBlock()
	ip := block + ".31"
	k.install(ns, releaseName, values(t,
		"rbac.namespaced=true,controller.replicas=1",
		"config.scrapeInterval=1s,config.scrapeTimeout=1s",
		// Peer discovery's error clears at its next round.
		"cluster.rejoinInterval=5s",
		"web.port="+strconv.Itoa(commonFreePort(t, ip)),
		"cluster.port="+strconv.Itoa(commonFreePort(t, ip)),
	))
	roles := k.cp.Client.RbacV1().Roles(ns)
	role, err := roles.Get(t.Context(), releaseName+"-shoal", metav1.GetOptions{})
	if err != nil {
		fatalf(t, "the chart's Role: %v", err)
	}
	whole := role.DeepCopy()
	for i, r := range role.Rules {
		if slices.Contains(r.Resources, "pods") {
			role.Rules[i].Verbs = slices.DeleteFunc(slices.Clone(r.Verbs), func(v string) bool { return v == "list" })
		}
	}
	if role, err = roles.Update(t.Context(), role, metav1.UpdateOptions{}); err != nil {
		fatal(t, err)
	}

	w := k.workload(ns, releaseName+"-shoal")
	r := k.startShoalPod(w, releaseName+"-shoal-0", ip, "")
	r.waitHTTP(startTimeout)
	// The API server's own words, as both discovery paths log them: shoal's
	// peer discovery, and client-go's reflector under kubernetes_sd_configs.
	const forbidden = `pods is forbidden: User \"system:serviceaccount:rbac:obs-shoal\" cannot list resource \"pods\"`
	testutil.Eventually(t, convergeTimeout, "the RBAC error in the log and the discovery error metric", func() error {
		if err := r.exitedEarly(); err != nil {
			fatal(t, err)
		}
		data, err := os.ReadFile(r.logPath)
		if err != nil {
			return err
		}
		var peers, targets bool
		for line := range strings.SplitSeq(string(data), "\n") {
			if !strings.Contains(line, forbidden) {
				continue
			}
			peers = peers || strings.Contains(line, "peer discovery failed")
			targets = targets || strings.Contains(line, "failed to list *v1.Pod")
		}
		if !peers || !targets {
			return fmt.Errorf("log lines with %s: from peer discovery %v, from target discovery %v", forbidden, peers, targets)
		}
		n, err := r.metricValue("shoal_cluster_discovery_errors_total", map[string]string{"method": "kubernetes"})
		if err != nil {
			return err
		}
		if n < 1 {
			return fmt.Errorf("shoal_cluster_discovery_errors_total{method=kubernetes} = %v", n)
		}
		errs, page, err := r.discoveryErrors()
		if err != nil {
			return err
		}
		// As the API's JSON and the page carry it: quotes unescaped.
		refusal := strings.ReplaceAll(forbidden, `\"`, `"`)
		if err := checkDiscoveryError(errs, page, "peers", "kubernetes", refusal); err != nil {
			return err
		}
		return checkDiscoveryError(errs, page, "targets", "kubernetes_sd *v1.Pod", "failed to list *v1.Pod: "+refusal)
	})
	active, err := r.activeTargets()
	if err != nil {
		fatal(t, err)
	}
	if len(active) != 0 {
		errorf(t, "targets found without the list verb: %v", sortedKeys(active))
	}

	// The Role made whole again: discovery works without a restart.
	whole.ResourceVersion = role.ResourceVersion
	if _, err := roles.Update(t.Context(), whole, metav1.UpdateOptions{}); err != nil {
		fatal(t, err)
	}
	testutil.Eventually(t, convergeTimeout, "its own pod discovered and scraped once the Role is whole", func() error {
		active, err := r.activeTargets()
		if err != nil {
			return err
		}
		at, ok := active[r.webAddr]
		if !ok || at.Health != "up" {
			return fmt.Errorf("active targets %v", active)
		}
		return nil
	})
	testutil.Eventually(t, convergeTimeout, "the discovery errors gone from the API and the status page", func() error {
		errs, page, err := r.discoveryErrors()
		if err != nil {
			return err
		}
		if len(errs) > 0 || strings.Contains(page, "Discovery errors") {
			return fmt.Errorf("discovery errors still shown: %+v", errs)
		}
		return nil
	})
}
