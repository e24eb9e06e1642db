package k8stest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// ServiceAccountIssuer is the issuer (and default audience) of the
// service-account tokens the API server signs.
const ServiceAccountIssuer = "https://kubernetes.default.svc.cluster.local"

// Options configure Start. The zero value of a field means its default in
// DefaultOptions.
type Options struct {
	// Binaries to run; RequireBinaries or FindBinaries finds them.
	Binaries Binaries
	// Dir holds etcd's data, the keys and the logs (etcd.log,
	// kube-apiserver.log). Required.
	Dir string
	// IP is the loopback address every listener binds.
	IP string
	// StartTimeout bounds the wait for each process to become ready.
	StartTimeout time.Duration
	// APIServerArgs are more kube-apiserver flags, after the harness' own
	// (where a flag is given twice, the later one wins).
	APIServerArgs []string
}

// DefaultOptions returns the defaults: 127.0.0.1 and three minutes per
// process, because a cold kube-apiserver start on a loaded two-core machine
// takes tens of seconds.
func DefaultOptions() Options {
	return Options{IP: "127.0.0.1", StartTimeout: 3 * time.Minute}
}

// ControlPlane is a running etcd and kube-apiserver.
type ControlPlane struct {
	// URL of the API server (https://IP:port).
	URL string
	// CAData is the PEM certificate that the API server's serving
	// certificate chains to.
	CAData []byte
	// Config is an administrator's client configuration (group
	// system:masters, authorised for everything).
	Config *rest.Config
	// Client is a clientset with Config.
	Client kubernetes.Interface
	// EtcdVersion and APIServerVersion are what the binaries report.
	EtcdVersion, APIServerVersion string

	dir       string
	etcd      *process
	apiserver *process
	stopOnce  sync.Once
	stopErr   error
}

// Start starts etcd, then kube-apiserver against it, and returns once the
// API server is ready (/readyz) and has created the default namespace.
// On error, whatever was started is stopped again.
func Start(ctx context.Context, o Options) (*ControlPlane, error) {
	d := DefaultOptions()
	if o.IP == "" {
		o.IP = d.IP
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = d.StartTimeout
	}
	if o.Dir == "" {
		return nil, errors.New("k8stest: Options.Dir is required")
	}
	ip := net.ParseIP(o.IP)
	if ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("k8stest: IP %q is not a loopback address", o.IP)
	}
	for _, b := range []struct{ name, path string }{{"kube-apiserver", o.Binaries.APIServer}, {"etcd", o.Binaries.Etcd}} {
		if err := executable(b.path); err != nil {
			return nil, &MissingError{Name: b.name, Path: b.path, Hint: "FindBinaries or RequireBinaries locates it"}
		}
	}
	c := &ControlPlane{dir: o.Dir}
	var err error
	if c.EtcdVersion, err = versionOf(ctx, o.Binaries.Etcd, "etcd Version:"); err != nil {
		return nil, err
	}
	keys, err := writePKI(filepath.Join(o.Dir, "pki"), ip)
	if err != nil {
		return nil, fmt.Errorf("k8stest: keys and certificates: %w", err)
	}
	c.CAData = keys.caPEM
	ports, err := freePorts(o.IP, 3)
	if err != nil {
		return nil, fmt.Errorf("k8stest: %w", err)
	}
	etcdURL := "http://" + hostPort(o.IP, ports[0])
	if err := c.startEtcd(o, etcdURL, "http://"+hostPort(o.IP, ports[1])); err != nil {
		c.Stop()
		return nil, err
	}
	if c.APIServerVersion, err = versionOf(ctx, o.Binaries.APIServer, "Kubernetes"); err != nil {
		c.Stop()
		return nil, err
	}
	c.URL = "https://" + hostPort(o.IP, ports[2])
	c.Config = &rest.Config{
		Host: c.URL,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   keys.caPEM,
			CertFile: keys.AdminCert,
			KeyFile:  keys.AdminKey,
		},
		// The defaults (5 QPS) make a chart install crawl.
		QPS:   100,
		Burst: 200,
	}
	if c.Client, err = kubernetes.NewForConfig(c.Config); err != nil {
		c.Stop()
		return nil, fmt.Errorf("k8stest: client: %w", err)
	}
	if err := c.startAPIServer(ctx, o, keys, etcdURL, ports[2]); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

func (c *ControlPlane) startEtcd(o Options, clientURL, peerURL string) error {
	const name = "shoal-test"
	args := []string{
		"--name=" + name,
		"--data-dir=" + filepath.Join(o.Dir, "etcd"),
		"--listen-client-urls=" + clientURL,
		"--advertise-client-urls=" + clientURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=" + name + "=" + peerURL,
		"--initial-cluster-state=new",
		"--logger=zap",
		"--log-outputs=stderr",
	}
	p, err := startProcess("etcd", o.Binaries.Etcd, args, filepath.Join(o.Dir, "etcd.log"))
	if err != nil {
		return fmt.Errorf("k8stest: %w", err)
	}
	c.etcd = p
	hc := &http.Client{Timeout: 2 * time.Second}
	err = p.waitUntil(o.StartTimeout, "etcd healthy at "+clientURL, func() error {
		resp, err := hc.Get(clientURL + "/health")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/health: %s", resp.Status)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("k8stest: %w", err)
	}
	return nil
}

func (c *ControlPlane) startAPIServer(ctx context.Context, o Options, keys *pki, etcdURL string, port int) error {
	args := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=" + o.IP,
		"--advertise-address=" + o.IP,
		fmt.Sprintf("--secure-port=%d", port),
		"--cert-dir=" + filepath.Join(o.Dir, "pki"),
		"--tls-cert-file=" + keys.ServingCert,
		"--tls-private-key-file=" + keys.ServingKey,
		"--client-ca-file=" + keys.CACert,
		"--authorization-mode=RBAC",
		"--anonymous-auth=false",
		"--service-account-issuer=" + ServiceAccountIssuer,
		"--service-account-key-file=" + keys.SAPub,
		"--service-account-signing-key-file=" + keys.SAKey,
		"--service-cluster-ip-range=10.96.0.0/16",
		// No kubelet or node runs, and the endpoints of the "kubernetes"
		// Service may not be loopback addresses: nothing to reconcile.
		"--endpoint-reconciler-type=none",
		"--profiling=false",
	}
	args = append(args, o.APIServerArgs...)
	p, err := startProcess("kube-apiserver", o.Binaries.APIServer, args, filepath.Join(o.Dir, "kube-apiserver.log"))
	if err != nil {
		return fmt.Errorf("k8stest: %w", err)
	}
	c.apiserver = p
	err = p.waitUntil(o.StartTimeout, "kube-apiserver ready at "+c.URL, func() error {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		body, err := c.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(rctx)
		if err != nil {
			return fmt.Errorf("/readyz: %w: %s", err, strings.TrimSpace(string(body)))
		}
		// The bootstrap controller creates it shortly after /readyz.
		if _, err := c.Client.CoreV1().Namespaces().Get(rctx, "default", metav1GetOptions); err != nil {
			return fmt.Errorf("namespace default: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("k8stest: %w", err)
	}
	return nil
}

// versionOf runs bin --version and returns the first line starting with
// prefix, trimmed; it names the binary when it cannot run.
func versionOf(ctx context.Context, bin, prefix string) (string, error) {
	vctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(vctx, bin, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("k8stest: %s --version: %w: %s", bin, err, strings.TrimSpace(string(out)))
	}
	for line := range strings.SplitSeq(string(out), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), prefix); ok {
			return strings.TrimSpace(v), nil
		}
	}
	return "", fmt.Errorf("k8stest: %s --version printed no %q line: %q", bin, prefix, out)
}

// Stop stops the API server, then etcd, each with SIGTERM and SIGKILL after
// 30 seconds. It may be called more than once.
func (c *ControlPlane) Stop() error {
	c.stopOnce.Do(func() {
		var errs []error
		for _, p := range []*process{c.apiserver, c.etcd} {
			if p != nil {
				errs = append(errs, p.stop(30*time.Second))
			}
		}
		c.stopErr = errors.Join(errs...)
	})
	return c.stopErr
}

// Logs returns the last n lines of each process' log, for a failing test.
func (c *ControlPlane) Logs(n int) string {
	var b strings.Builder
	for _, p := range []*process{c.etcd, c.apiserver} {
		if p != nil {
			fmt.Fprintf(&b, "---- last %d lines of %s ----\n%s\n", n, p.logPath, p.tail(n))
		}
	}
	return b.String()
}

// TestPrefix starts the name of every test that runs an API server. The
// Makefile selects tests by it: `make test-unit` skips them and `make
// test-k8s`, which builds kube-apiserver first, runs them, so that no test
// needs a tool that its make target has not built yet.
const TestPrefix = "TestKubernetes"

// StartForTest requires the binaries (see RequireBinaries), starts a
// control plane in a temporary directory and stops it when the test ends;
// if the test failed, the end of both logs is printed. It fails a test not
// named TestPrefix…: that test would run before kube-apiserver is built.
func StartForTest(t testing.TB) *ControlPlane {
	t.Helper()
	if !strings.HasPrefix(t.Name(), TestPrefix) {
		t.Fatalf("%s starts an API server but is not named %s…: only tests so named run in `make test-k8s`, after kube-apiserver is built (see the Makefile)", t.Name(), TestPrefix)
	}
	bins := RequireBinaries(t)
	c, err := Start(context.Background(), Options{Binaries: bins, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("control plane: kube-apiserver %s, etcd %s at %s", c.APIServerVersion, c.EtcdVersion, c.URL)
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stopping the control plane: %v", err)
		}
		if t.Failed() {
			t.Log(c.Logs(40))
		}
	})
	return c
}
