package k8stest

import (
	"context"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

var metav1GetOptions = metav1.GetOptions{}

// CreateNamespace creates the namespace and its "default" ServiceAccount,
// which the controller-manager (not running here) would create and without
// which the API server refuses pods that use it. An existing namespace or
// account is fine.
func (c *ControlPlane) CreateNamespace(ctx context.Context, name string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("k8stest: creating namespace %s: %w", name, err)
	}
	return c.CreateServiceAccount(ctx, name, "default")
}

// CreateServiceAccount creates a ServiceAccount; an existing one is fine.
func (c *ControlPlane) CreateServiceAccount(ctx context.Context, namespace, name string) error {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if _, err := c.Client.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("k8stest: creating ServiceAccount %s/%s: %w", namespace, name, err)
	}
	return nil
}

// Token returns a token of the ServiceAccount from the TokenRequest API, as
// the kubelet would project into a pod, valid for ttl (at least ten
// minutes, the API's minimum).
func (c *ControlPlane) Token(ctx context.Context, namespace, serviceAccount string, ttl time.Duration) (string, error) {
	secs := int64(max(ttl, 10*time.Minute) / time.Second)
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}
	got, err := c.Client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, serviceAccount, tr, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("k8stest: token for ServiceAccount %s/%s: %w", namespace, serviceAccount, err)
	}
	return got.Status.Token, nil
}

// TokenConfig is a client configuration that authenticates with token only.
func (c *ControlPlane) TokenConfig(token string) *rest.Config {
	return &rest.Config{
		Host:            c.URL,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.CAData},
		BearerToken:     token,
		QPS:             c.Config.QPS,
		Burst:           c.Config.Burst,
	}
}

// TokenClient is a clientset that authenticates with token only.
func (c *ControlPlane) TokenClient(token string) (kubernetes.Interface, error) {
	return kubernetes.NewForConfig(c.TokenConfig(token))
}

// WriteKubeconfig writes a kubeconfig file for the API server whose one
// context authenticates with token and defaults to namespace (which may be
// empty). This is what a process outside the cluster uses in place of the
// in-cluster configuration.
func (c *ControlPlane) WriteKubeconfig(path, token, namespace string) error {
	return c.writeKubeconfig(path, &clientcmdapi.AuthInfo{Token: token}, namespace)
}

// WriteAdminKubeconfig writes a kubeconfig file with the administrator's
// client certificate (for tools such as the Helm SDK).
func (c *ControlPlane) WriteAdminKubeconfig(path, namespace string) error {
	return c.writeKubeconfig(path, &clientcmdapi.AuthInfo{
		ClientCertificate: c.Config.CertFile,
		ClientKey:         c.Config.KeyFile,
	}, namespace)
}

func (c *ControlPlane) writeKubeconfig(path string, auth *clientcmdapi.AuthInfo, namespace string) error {
	const name = "shoal-test"
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: c.URL, CertificateAuthorityData: c.CAData}
	cfg.AuthInfos[name] = auth
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name, Namespace: namespace}
	cfg.CurrentContext = name
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("k8stest: writing kubeconfig: %w", err)
	}
	return nil
}
