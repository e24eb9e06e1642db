package k8stest

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/shoal-dev/shoal/internal/testutil"
)

// recordingTB records what RequireBinaries asks of the test.
type recordingTB struct {
	skipped, failed string
}

func (r *recordingTB) Helper()          {}
func (r *recordingTB) Skip(args ...any) { r.skipped = fmt.Sprint(args...) }
func (r *recordingTB) Fatal(args ...any) {
	r.failed = fmt.Sprint(args...)
}

func missingBinaries(t *testing.T) {
	t.Setenv(EnvAPIServer, filepath.Join(t.TempDir(), "no-kube-apiserver"))
	t.Setenv(EnvEtcd, filepath.Join(t.TempDir(), "no-etcd"))
}

func TestFindBinariesNamesWhatIsMissing(t *testing.T) {
	missingBinaries(t)
	_, err := FindBinaries()
	var missing *MissingError
	if !errors.As(err, &missing) {
		t.Fatalf("FindBinaries with nothing installed: %v, want a *MissingError", err)
	}
	for _, want := range []string{"kube-apiserver not found", "make kube-apiserver", EnvAPIServer, "etcd not found", "etcd-server", EnvEtcd} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestFindBinariesRefusesNonExecutable(t *testing.T) {
	missingBinaries(t)
	notExec := filepath.Join(t.TempDir(), "kube-apiserver")
	if err := os.WriteFile(notExec, []byte("not a program"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvAPIServer, notExec)
	if _, err := FindBinaries(); err == nil || !strings.Contains(err.Error(), "kube-apiserver not found (looked for "+notExec) {
		t.Fatalf("FindBinaries with a non-executable kube-apiserver: %v", err)
	}
}

func TestRequireBinariesSkipsOutsideCI(t *testing.T) {
	missingBinaries(t)
	t.Setenv("CI", "")
	var r recordingTB
	RequireBinaries(&r)
	if r.failed != "" || !strings.Contains(r.skipped, "kube-apiserver not found") || !strings.Contains(r.skipped, "make kube-apiserver") {
		t.Fatalf("outside CI: skipped %q, failed %q; want a skip naming the binary and how to build it", r.skipped, r.failed)
	}
}

func TestRequireBinariesFailsInCI(t *testing.T) {
	missingBinaries(t)
	t.Setenv("CI", "true")
	var r recordingTB
	RequireBinaries(&r)
	if r.skipped != "" || !strings.Contains(r.failed, "etcd not found") || !strings.Contains(r.failed, "in CI") {
		t.Fatalf("in CI: skipped %q, failed %q; want a failure naming the binary", r.skipped, r.failed)
	}
}

// misnamedTB is a test named name whose Fatalf records the message and
// stops StartForTest by panicking.
type misnamedTB struct {
	testing.TB
	name, fatal string
}

func (m *misnamedTB) Name() string { return m.name }
func (m *misnamedTB) Fatalf(format string, args ...any) {
	m.fatal = fmt.Sprintf(format, args...)
	panic(m)
}

// TestStartForTestRefusesTestsNotNamedForTestK8s: a test that starts an API
// server but would run in `make test-unit` (before kube-apiserver is built)
// fails at once, naming the rule, whether or not the binaries exist.
func TestStartForTestRefusesTestsNotNamedForTestK8s(t *testing.T) {
	m := &misnamedTB{TB: t, name: "TestWatcherWithAPIServer"}
	func() {
		defer func() {
			if r := recover(); r != nil && r != any(m) {
				panic(r)
			}
		}()
		StartForTest(m)
		t.Fatal("StartForTest started a control plane for a test not named " + TestPrefix + "…")
	}()
	if !strings.Contains(m.fatal, "not named TestKubernetes…") || !strings.Contains(m.fatal, "make test-k8s") {
		t.Fatalf("StartForTest failed with %q; want it to name the rule", m.fatal)
	}
}

func TestStartRefusesBadOptions(t *testing.T) {
	ok := Binaries{APIServer: "/bin/true", Etcd: "/bin/true"}
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"no dir", Options{Binaries: ok}, "Options.Dir is required"},
		{"not loopback", Options{Binaries: ok, Dir: t.TempDir(), IP: "192.0.2.1"}, "not a loopback address"},
		{"no apiserver", Options{Binaries: Binaries{Etcd: "/bin/true"}, Dir: t.TempDir()}, "kube-apiserver not found"},
		{"no etcd", Options{Binaries: Binaries{APIServer: "/bin/true", Etcd: "/nonexistent/etcd"}, Dir: t.TempDir()}, "etcd not found (looked for /nonexistent/etcd)"},
		{"no version", Options{Binaries: ok, Dir: t.TempDir()}, `printed no "etcd Version:" line`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Start(t.Context(), tc.o)
			if err == nil {
				c.Stop()
				t.Fatal("Start succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Start: %v; want it to mention %q", err, tc.want)
			}
		})
	}
}

func TestPKI(t *testing.T) {
	ip := net.ParseIP("127.0.0.9")
	p, err := writePKI(t.TempDir(), ip)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(p.caPEM) {
		t.Fatal("CA certificate does not parse")
	}
	serving := readCert(t, p.ServingCert)
	if _, err := serving.Verify(x509.VerifyOptions{Roots: roots, DNSName: ip.String()}); err != nil {
		t.Errorf("serving certificate for %s: %v", ip, err)
	}
	if err := serving.VerifyHostname("kubernetes.default.svc"); err != nil {
		t.Errorf("serving certificate: %v", err)
	}
	admin := readCert(t, p.AdminCert)
	if _, err := admin.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("admin client certificate: %v", err)
	}
	if got := admin.Subject.Organization; len(got) != 1 || got[0] != "system:masters" {
		t.Errorf("admin certificate groups %v, want [system:masters]", got)
	}
	block, _ := pem.Decode(mustRead(t, p.SAPub))
	if block == nil {
		t.Fatal("service-account public key is not PEM")
	}
	if _, err := x509.ParsePKIXPublicKey(block.Bytes); err != nil {
		t.Errorf("service-account public key: %v", err)
	}
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(mustRead(t, path))
	if block == nil {
		t.Fatalf("%s is not PEM", path)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// requireEtcd is RequireBinaries for the tests that run etcd only.
func requireEtcd(t *testing.T) Binaries {
	t.Helper()
	b, err := FindBinaries()
	var missing *MissingError
	if b.Etcd == "" && errors.As(err, &missing) {
		RequireBinaries(t)
	}
	return b
}

// TestStartEtcd starts the real etcd alone: it answers /health, and Stop
// ends it.
func TestStartEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd")
	}
	bins := requireEtcd(t)
	dir := t.TempDir()
	c := &ControlPlane{dir: dir}
	ports, err := freePorts("127.0.0.1", 2)
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + hostPort("127.0.0.1", ports[0])
	err = c.startEtcd(Options{Binaries: bins, Dir: dir, StartTimeout: time.Minute}, url, "http://"+hostPort("127.0.0.1", ports[1]))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if c.etcd.exited() == nil {
		t.Fatal("etcd still running after Stop")
	}
	if conn, err := net.DialTimeout("tcp", strings.TrimPrefix(url, "http://"), time.Second); err == nil {
		conn.Close()
		t.Errorf("etcd still listening at %s after Stop", url)
	}
}

// TestStartReportsEtcdFailure starts the real etcd where its data directory
// cannot be created: Start must return at once with etcd's own complaint.
func TestStartReportsEtcdFailure(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd")
	}
	bins := requireEtcd(t)
	bins.APIServer = "/bin/false" // never reached
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "etcd"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	c, err := Start(t.Context(), Options{Binaries: bins, Dir: dir})
	if err == nil {
		c.Stop()
		t.Fatal("Start succeeded with a file in place of etcd's data directory")
	}
	if !strings.Contains(err.Error(), "etcd exited") || !strings.Contains(err.Error(), filepath.Join(dir, "etcd")) {
		t.Fatalf("Start: %v; want etcd's exit and its log naming the data directory", err)
	}
	t.Logf("Start: %v", err)
	if d := time.Since(start); d > DefaultOptions().StartTimeout/2 {
		t.Errorf("Start took %v to report etcd's exit; it should not wait for the start timeout", d)
	}
}

// TestStartReportsAPIServerFailure gives the real kube-apiserver a flag value
// it refuses: Start must return its complaint and leave no etcd behind.
func TestStartReportsAPIServerFailure(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver")
	}
	bins := RequireBinaries(t)
	_, err := Start(t.Context(), Options{Binaries: bins, Dir: t.TempDir(), APIServerArgs: []string{"--authorization-mode=NoSuchMode"}})
	if err == nil {
		t.Fatal("Start succeeded with an unknown authorization mode")
	}
	if !strings.Contains(err.Error(), "kube-apiserver exited") || !strings.Contains(err.Error(), "NoSuchMode") {
		t.Fatalf("Start: %v; want kube-apiserver's exit with its complaint about NoSuchMode", err)
	}
}

// TestKubernetesControlPlane starts the real control plane and checks each thing the
// end-to-end tests rely on: the version, RBAC enforced on service-account
// tokens from the TokenRequest API, kubeconfig files, namespaces that accept
// pods, and a clean stop.
func TestKubernetesControlPlane(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver")
	}
	c := StartForTest(t)
	ctx := t.Context()
	if c.APIServerVersion != KubernetesVersion {
		t.Errorf("kube-apiserver --version says %q, want %q", c.APIServerVersion, KubernetesVersion)
	}
	v, err := c.Client.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if v.GitVersion != KubernetesVersion {
		t.Errorf("server reports version %q, want %q (Helm checks charts' kubeVersion against it)", v.GitVersion, KubernetesVersion)
	}

	const ns, sa = "k8stest", "reader"
	if err := c.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateNamespace(ctx, ns); err != nil {
		t.Fatalf("CreateNamespace of an existing namespace: %v", err)
	}
	// A pod with the namespace's default ServiceAccount is admitted.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: ns},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/c"}}},
	}
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating a pod in a namespace from CreateNamespace: %v", err)
	}
	if err := c.CreateServiceAccount(ctx, ns, sa); err != nil {
		t.Fatal(err)
	}
	token, err := c.Token(ctx, ns, sa, time.Hour)
	if err != nil {
		t.Fatal(err)
	}

	// The token authenticates as the ServiceAccount, through a kubeconfig.
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := c.WriteKubeconfig(kubeconfig, token, ns); err != nil {
		t.Fatal(err)
	}
	loaded := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: kubeconfig}, &clientcmd.ConfigOverrides{})
	if gotNS, _, err := loaded.Namespace(); err != nil || gotNS != ns {
		t.Errorf("kubeconfig namespace %q (%v), want %q", gotNS, err, ns)
	}
	rc, err := loaded.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	saClient, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	review, err := saClient.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := "system:serviceaccount:" + ns + ":" + sa; review.Status.UserInfo.Username != want {
		t.Errorf("token authenticates as %q, want %q", review.Status.UserInfo.Username, want)
	}

	// RBAC: nothing before a Role grants it, exactly what it grants after.
	if _, err := saClient.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("listing pods without a Role: %v, want Forbidden", err)
	}
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "list-pods", Namespace: ns},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}}},
	}
	if _, err := c.Client.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "list-pods", Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "list-pods"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}},
	}
	if _, err := c.Client.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the Role takes effect", func() error {
		_, err := saClient.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		return err
	})
	if _, err := saClient.CoreV1().Pods(ns).Get(ctx, "p", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("get, which the Role does not grant: %v, want Forbidden", err)
	}
	if _, err := saClient.CoreV1().Pods("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("listing pods in another namespace: %v, want Forbidden", err)
	}

	// The administrator's kubeconfig works too.
	adminConfig := filepath.Join(t.TempDir(), "admin")
	if err := c.WriteAdminKubeconfig(adminConfig, ns); err != nil {
		t.Fatal(err)
	}
	arc, err := clientcmd.BuildConfigFromFlags("", adminConfig)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := kubernetes.NewForConfig(arc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("admin kubeconfig: %v", err)
	}

	// Stop ends both processes and frees the API server's port.
	addr := strings.TrimPrefix(c.URL, "https://")
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		conn.Close()
		t.Errorf("API server still listening at %s after Stop", addr)
	}
	for _, p := range []*process{c.apiserver, c.etcd} {
		if err := p.exited(); err == nil {
			t.Errorf("%s still running after Stop", p.name)
		}
	}
}
