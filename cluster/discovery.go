package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/shoal-dev/shoal/discoveryerr"
)

// lookupTimeout bounds one DNS or Kubernetes look-up.
const lookupTimeout = 10 * time.Second

const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// discoverer turns the Join entries and the Kubernetes selector into the
// gossip addresses ("ip:port") of candidate peers.
type discoverer struct {
	specs      []joinSpec
	resolver   *net.Resolver
	kube       kubernetes.Interface
	selector   string
	namespace  string
	listenPort int
	// onError is called once per failed look-up with its method.
	onError func(method string, err error)
	// onSuccess is called after a discovery round for each method whose
	// look-ups all succeeded in it.
	onSuccess func(method string)
}

func newKubeClient(cfg Config) (kubernetes.Interface, string, error) {
	ns := cfg.KubernetesNamespace
	if ns == "" {
		ns = "default"
		if b, err := os.ReadFile(serviceAccountNamespace); err == nil && strings.TrimSpace(string(b)) != "" {
			ns = strings.TrimSpace(string(b))
		}
	}
	if cfg.KubeClient != nil {
		return cfg.KubeClient, ns, nil
	}
	rc, err := rest.InClusterConfig()
	if err != nil {
		return nil, "", fmt.Errorf("cluster: Kubernetes peer discovery needs the in-cluster configuration: %w", err)
	}
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, "", fmt.Errorf("cluster: Kubernetes client: %w", err)
	}
	return c, ns, nil
}

// DiscoveryErrors returns the last error of each peer discovery method
// (dns, dnssrv, kubernetes) that has failed since it last succeeded.
func (n *Node) DiscoveryErrors() []discoveryerr.Error {
	return n.discErrs.Errors()
}

// discover returns every candidate address, deduplicated and sorted. Failed
// look-ups are reported through onError and skipped: one bad entry must not
// keep the node from joining the peers the others name.
func (d *discoverer) discover(ctx context.Context) []string {
	tried, failed := map[string]bool{}, map[string]bool{}
	onError := func(method string, err error) {
		failed[method] = true
		d.onError(method, err)
	}
	defer func() {
		for m := range tried {
			if !failed[m] && d.onSuccess != nil {
				d.onSuccess(m)
			}
		}
	}()
	seen := map[string]struct{}{}
	add := func(ip net.IP, port int) {
		seen[net.JoinHostPort(ip.String(), strconv.Itoa(port))] = struct{}{}
	}
	for _, s := range d.specs {
		switch s.kind {
		case joinHost:
			tried["dns"] = true
			ips, err := d.lookupHost(ctx, s.host)
			if err != nil {
				onError("dns", fmt.Errorf("join %q: %w", s.raw, err))
				continue
			}
			for _, ip := range ips {
				add(ip, s.port)
			}
		case joinSRV:
			tried["dnssrv"] = true
			lctx, cancel := context.WithTimeout(ctx, lookupTimeout)
			_, srvs, err := d.resolver.LookupSRV(lctx, "", "", s.host)
			cancel()
			if err != nil {
				onError("dnssrv", fmt.Errorf("join %q: %w", s.raw, err))
				continue
			}
			for _, srv := range srvs {
				ips, err := d.lookupHost(ctx, srv.Target)
				if err != nil {
					onError("dnssrv", fmt.Errorf("join %q: target %s: %w", s.raw, srv.Target, err))
					continue
				}
				for _, ip := range ips {
					add(ip, int(srv.Port))
				}
			}
		}
	}
	if d.kube != nil && d.selector != "" {
		tried["kubernetes"] = true
		ips, err := d.kubePods(ctx)
		if err != nil {
			onError("kubernetes", err)
		}
		for _, ip := range ips {
			add(ip, d.listenPort)
		}
	}
	out := make([]string, 0, len(seen))
	for a := range seen {
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}

func (d *discoverer) lookupHost(ctx context.Context, host string) ([]net.IP, error) {
	if ip := net.ParseIP(host); ip != nil {
		return []net.IP{ip}, nil
	}
	lctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	addrs, err := d.resolver.LookupIPAddr(lctx, host)
	if err != nil {
		return nil, err
	}
	ips := make([]net.IP, 0, len(addrs))
	for _, a := range addrs {
		ips = append(ips, a.IP)
	}
	return ips, nil
}

// kubePods returns the IPs of the Running pods that match the selector.
func (d *discoverer) kubePods(ctx context.Context) ([]net.IP, error) {
	lctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	pods, err := d.kube.CoreV1().Pods(d.namespace).List(lctx, metav1.ListOptions{LabelSelector: d.selector})
	if err != nil {
		return nil, fmt.Errorf("listing pods in namespace %q matching %q: %w", d.namespace, d.selector, err)
	}
	var ips []net.IP
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			continue
		}
		ip := net.ParseIP(p.Status.PodIP)
		if ip == nil {
			continue
		}
		ips = append(ips, ip)
	}
	return ips, nil
}
