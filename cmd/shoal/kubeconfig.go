package main

import (
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// kubeClientFromFile builds the client for --cluster.kubernetes.label-selector
// from a kubeconfig file (its current context), for a shoal running outside
// the cluster it discovers, as kubernetes_sd_configs' kubeconfig_file does
// for targets. It also returns the context's namespace ("" when unset).
func kubeClientFromFile(path string) (kubernetes.Interface, string, error) {
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: path}, &clientcmd.ConfigOverrides{})
	rc, err := cc.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("--cluster.kubernetes.kubeconfig %s: %w", path, err)
	}
	// The raw context, because clientcmd's Namespace() says "default" when
	// the context names none, and the cluster package has its own default.
	raw, err := cc.RawConfig()
	if err != nil {
		return nil, "", fmt.Errorf("--cluster.kubernetes.kubeconfig %s: %w", path, err)
	}
	var ns string
	if ctx := raw.Contexts[raw.CurrentContext]; ctx != nil {
		ns = ctx.Namespace
	}
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, "", fmt.Errorf("--cluster.kubernetes.kubeconfig %s: %w", path, err)
	}
	return c, ns, nil
}
