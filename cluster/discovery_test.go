package cluster

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/shoal-dev/shoal/discoveryerr"
	"github.com/shoal-dev/shoal/internal/testutil"
)

// Every join form, end to end: three nodes that know each other only
// through a real DNS server converge.
func TestDNSDiscoveryForms(t *testing.T) {
	for _, form := range []string{"host:port", "dns+host:port", "dnssrv+"} {
		t.Run(form, func(t *testing.T) {
			tn := newTestNet(t)
			d := startDNS(t)
			var ips []string
			var srvs []*net.SRV
			for i := 1; i <= 3; i++ {
				ips = append(ips, tn.ip(i))
				target := fmt.Sprintf("n%d.shoal.test", i)
				d.setA(target, tn.ip(i))
				srvs = append(srvs, &net.SRV{Target: target, Port: uint16(tn.port)})
			}
			d.setA("peers.shoal.test", ips...)
			d.setSRV("_gossip._tcp.peers.shoal.test", srvs...)

			join := map[string]string{
				"host:port":     "peers.shoal.test:" + strconv.Itoa(tn.port),
				"dns+host:port": "dns+peers.shoal.test:" + strconv.Itoa(tn.port),
				"dnssrv+":       "dnssrv+_gossip._tcp.peers.shoal.test",
			}[form]

			// The discoverer alone returns every record.
			cfg := testConfig(tn, 1)
			cfg.Join = []string{join}
			cfg.Resolver = ResolverFor(d.addr)
			probe, err := New(cfg, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			got := probe.disc.discover(t.Context())
			want := []string{tn.addr(1), tn.addr(2), tn.addr(3)}
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("discover(%s) = %v, want %v", join, got, want)
			}

			var nodes []testNode
			for i := 1; i <= 3; i++ {
				cfg := testConfig(tn, i)
				cfg.Join = []string{join}
				cfg.Resolver = ResolverFor(d.addr)
				nodes = append(nodes, startNode(t, cfg))
				nodes[i-1].SetState(Participant)
			}
			testutil.Eventually(t, 15*time.Second, "converged through DNS", converged(nodes, expectView(allStates(nodes, Participant))))
		})
	}
}

// A node whose discovery names only itself never tries to join itself.
func TestDiscoverySkipsSelf(t *testing.T) {
	tn := newTestNet(t)
	d := startDNS(t)
	d.setA("self.shoal.test", tn.ip(1))
	cfg := testConfig(tn, 1)
	cfg.Join = []string{"self.shoal.test:" + strconv.Itoa(tn.port), tn.addr(1)}
	cfg.Resolver = ResolverFor(d.addr)
	n := startNode(t, cfg)
	for _, r := range []string{"success", "failure"} {
		if got := promtestutil.ToFloat64(n.metrics.joins.WithLabelValues(r)); got != 0 {
			t.Errorf("join attempts{result=%s} = %v, want 0", r, got)
		}
	}
	if got := view(n.Node); got != "node-01=viewer" {
		t.Errorf("view = %s", got)
	}
}

// A name that does not resolve is counted and does not stop the other join
// entries from working.
func TestDiscoveryErrorIsCountedAndSkipped(t *testing.T) {
	tn := newTestNet(t)
	d := startDNS(t)
	first := startNode(t, testConfig(tn, 1))
	cfg := testConfig(tn, 2)
	cfg.Join = []string{"missing.shoal.test:" + strconv.Itoa(tn.port), "dnssrv+_x._tcp.missing.shoal.test", tn.addr(1)}
	cfg.Resolver = ResolverFor(d.addr)
	second := startNode(t, cfg)
	if got := promtestutil.ToFloat64(second.metrics.discoveryErrs.WithLabelValues("dns")); got != 1 {
		t.Errorf("discovery errors{method=dns} = %v, want 1", got)
	}
	if got := promtestutil.ToFloat64(second.metrics.discoveryErrs.WithLabelValues("dnssrv")); got != 1 {
		t.Errorf("discovery errors{method=dnssrv} = %v, want 1", got)
	}
	nodes := []testNode{first, second}
	testutil.Eventually(t, 10*time.Second, "joined the good entry", converged(nodes, expectView(allStates(nodes, Viewer))))
}

// Two halves formed apart merge once DNS lists both and the rejoin interval
// passes.
func TestSplitBrainHeals(t *testing.T) {
	tn := newTestNet(t)
	d := startDNS(t)
	d.setA("a.shoal.test", tn.ip(1), tn.ip(2))
	d.setA("b.shoal.test", tn.ip(3), tn.ip(4))
	port := strconv.Itoa(tn.port)
	var nodes []testNode
	for i := 1; i <= 4; i++ {
		cfg := testConfig(tn, i)
		cfg.Resolver = ResolverFor(d.addr)
		cfg.RejoinInterval = 300 * time.Millisecond
		if i <= 2 {
			cfg.Join = []string{"dns+a.shoal.test:" + port}
		} else {
			cfg.Join = []string{"b.shoal.test:" + port}
		}
		nodes = append(nodes, startNode(t, cfg))
		nodes[i-1].SetState(Participant)
	}
	halfA, halfB := nodes[:2], nodes[2:]
	testutil.Eventually(t, 10*time.Second, "half A formed", converged(halfA, expectView(allStates(halfA, Participant))))
	testutil.Eventually(t, 10*time.Second, "half B formed", converged(halfB, expectView(allStates(halfB, Participant))))
	// Several rejoin rounds pass without either half learning of the other.
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		if err := converged(halfA, expectView(allStates(halfA, Participant)))(); err != nil {
			t.Fatalf("halves merged before DNS listed both: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	all := []string{tn.ip(1), tn.ip(2), tn.ip(3), tn.ip(4)}
	d.setA("a.shoal.test", all...)
	d.setA("b.shoal.test", all...)
	testutil.Eventually(t, 15*time.Second, "halves merged", converged(nodes, expectView(allStates(nodes, Participant))))
}

func pod(name, ns, ip string, phase corev1.PodPhase, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Status:     corev1.PodStatus{Phase: phase, PodIP: ip},
	}
}

// Only Running pods with an IP that match the selector in the namespace
// are joined; each decoy pod's IP runs a real node that must stay apart.
func TestPodDiscoveryJoinsOnlyMatchingRunningPods(t *testing.T) {
	tn := newTestNet(t)
	app := map[string]string{"app": "shoal"}
	client := fake.NewClientset(
		pod("shoal-1", "mon", tn.ip(1), corev1.PodRunning, app), // the joiner itself
		pod("shoal-2", "mon", tn.ip(2), corev1.PodRunning, app),
		pod("shoal-3", "mon", tn.ip(3), corev1.PodRunning, app),
		pod("shoal-4", "mon", tn.ip(4), corev1.PodPending, app),                               // not running
		pod("shoal-5", "mon", "", corev1.PodRunning, app),                                     // no IP
		pod("other-6", "mon", tn.ip(6), corev1.PodRunning, map[string]string{"app": "other"}), // wrong label
		pod("shoal-7", "elsewhere", tn.ip(7), corev1.PodRunning, app),                         // wrong namespace
	)
	var others []testNode
	for _, i := range []int{2, 3, 4, 6, 7} {
		others = append(others, startNode(t, testConfig(tn, i)))
	}

	cfg := testConfig(tn, 1)
	cfg.KubernetesLabelSelector = "app=shoal"
	cfg.KubernetesNamespace = "mon"
	cfg.KubeClient = client
	probe, err := New(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := probe.disc.discover(t.Context())
	want := []string{tn.addr(1), tn.addr(2), tn.addr(3)}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("discover = %v, want %v", got, want)
	}

	joiner := startNode(t, cfg)
	// The join runs inside Start, so a wrongly joined decoy would already
	// be a member.
	members := []testNode{joiner, others[0], others[1]}
	testutil.Eventually(t, 10*time.Second, "joined the matching pods", converged(members, expectView(allStates(members, Viewer))))
	for _, decoy := range others[2:] {
		if got := view(decoy.Node); got != decoy.cfg.NodeName+"=viewer" {
			t.Errorf("decoy %s was joined: it sees %s", decoy.cfg.NodeName, got)
		}
	}
	if got := promtestutil.ToFloat64(joiner.metrics.joins.WithLabelValues("failure")); got != 0 {
		t.Errorf("join failures = %v, want 0", got)
	}
}

func TestPodLabelSelectorIsValidated(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ListenAddr = "127.0.0.1:0"
	cfg.KubernetesLabelSelector = "app in (("
	cfg.KubeClient = fake.NewClientset()
	if _, err := New(cfg, nil, nil); err == nil {
		t.Fatal("New accepted a malformed label selector")
	}
}

// The last error of each method is kept, with a count, until a discovery
// round in which every look-up of that method succeeds.
func TestDiscoveryErrorsClearOnSuccess(t *testing.T) {
	tn := newTestNet(t)
	d := startDNS(t)
	cfg := testConfig(tn, 1)
	cfg.Join = []string{"later.shoal.test:" + strconv.Itoa(tn.port), tn.addr(2)}
	cfg.Resolver = ResolverFor(d.addr)
	probe, err := New(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	probe.disc.discover(t.Context())
	probe.disc.discover(t.Context())
	errs := probe.DiscoveryErrors()
	if len(errs) != 1 || errs[0].Kind != discoveryerr.Peers || errs[0].Method != "dns" || errs[0].Count != 2 ||
		!strings.Contains(errs[0].Text, `join "later.shoal.test:`) || errs[0].Time.IsZero() {
		t.Fatalf("after two failed rounds (the IP entry resolving): %+v", errs)
	}

	d.setA("later.shoal.test", tn.ip(3))
	if got := probe.disc.discover(t.Context()); len(got) != 2 {
		t.Fatalf("discover = %v, want two addresses", got)
	}
	if errs := probe.DiscoveryErrors(); len(errs) != 0 {
		t.Errorf("after a round without failures: %+v", errs)
	}
}
