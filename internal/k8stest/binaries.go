// Package k8stest runs a real Kubernetes control plane for tests: etcd and
// kube-apiserver as processes on loopback, with TLS, RBAC authorization and
// service-account token signing, and no controller-manager, scheduler or
// kubelet. Tests create what those would (namespaces' default
// ServiceAccounts, pod status, EndpointSlices) through the API themselves.
//
// The binaries are not downloaded: `make kube-apiserver` builds the API
// server from the Go module proxy into a cache keyed by its version, and etcd
// comes from the system (Debian's etcd-server). Without them a test is
// skipped with the reason, except in CI (CI=true), where it fails.
package k8stest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/shoal-dev/shoal/internal/testutil"
)

// KubernetesVersion is the kube-apiserver the tests run, as built by
// `make kube-apiserver` (scripts/build-kube-apiserver.sh).
const KubernetesVersion = "v1.37.2"

// Environment variables that point at the binaries instead of the defaults.
const (
	// EnvAPIServer is the path of kube-apiserver; default
	// $HOME/.cache/shoal-tools/kube-apiserver-<KubernetesVersion>/kube-apiserver.
	EnvAPIServer = "SHOAL_KUBE_APISERVER"
	// EnvEtcd is the path of etcd; default "etcd" in PATH.
	EnvEtcd = "SHOAL_ETCD"
)

// Binaries are the paths of the control plane's programs.
type Binaries struct {
	APIServer string
	Etcd      string
}

// MissingError says which binary is missing and how to get it.
type MissingError struct {
	Name string // "kube-apiserver" or "etcd"
	Path string // where it was looked for
	Hint string // how to get it
}

func (e *MissingError) Error() string {
	return fmt.Sprintf("%s not found (looked for %s): %s", e.Name, e.Path, e.Hint)
}

// DefaultAPIServerPath is where `make kube-apiserver` puts the binary.
func DefaultAPIServerPath() string {
	home, err := os.UserHomeDir()
	if err != nil {
		home = os.TempDir()
	}
	return filepath.Join(home, ".cache", "shoal-tools", "kube-apiserver-"+KubernetesVersion, "kube-apiserver")
}

// FindBinaries locates kube-apiserver and etcd from the environment
// variables or their defaults. A missing one is a *MissingError.
func FindBinaries() (Binaries, error) {
	var b Binaries
	var errs []error
	api := os.Getenv(EnvAPIServer)
	if api == "" {
		api = DefaultAPIServerPath()
	}
	if err := executable(api); err != nil {
		errs = append(errs, &MissingError{Name: "kube-apiserver", Path: api,
			Hint: "run `make kube-apiserver` (builds " + KubernetesVersion + " from the Go module proxy, about 15 minutes the first time) or set " + EnvAPIServer})
	} else {
		b.APIServer = api
	}
	etcd := os.Getenv(EnvEtcd)
	if etcd == "" {
		etcd = "etcd"
	}
	if p, err := exec.LookPath(etcd); err != nil {
		errs = append(errs, &MissingError{Name: "etcd", Path: etcd,
			Hint: "install Debian's etcd-server (apt-get install etcd-server) or set " + EnvEtcd})
	} else {
		b.Etcd = p
	}
	return b, errors.Join(errs...)
}

func executable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", path)
	}
	return nil
}

// TB is the part of testing.TB that RequireBinaries uses.
type TB = testutil.Skipper

// RequireBinaries returns the binaries, or skips the test naming what is
// missing and how to get it; in CI it fails the test instead.
func RequireBinaries(t TB) Binaries {
	t.Helper()
	b, err := FindBinaries()
	if err == nil {
		return b
	}
	testutil.Unavailable(t, "Kubernetes control plane unavailable: "+err.Error())
	return b
}
