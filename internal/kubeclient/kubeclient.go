package kubeclient

import (
	"errors"
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/microlet/microlet/internal/version"
)

// InCluster is the kubeconfig value that selects the in-cluster service account.
const InCluster = "in-cluster"

// ErrStandalone is returned by Config when no kubeconfig is given.
var ErrStandalone = errors.New("no kubeconfig: standalone mode")

// Config loads a rest.Config for component. An empty kubeconfig yields
// ErrStandalone, so callers can branch on errors.Is.
func Config(kubeconfig, component string, qps float32, burst int) (*rest.Config, error) {
	var (
		cfg *rest.Config
		err error
	)
	switch kubeconfig {
	case "":
		return nil, ErrStandalone
	case InCluster:
		cfg, err = rest.InClusterConfig()
	default:
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	cfg.UserAgent = version.UserAgent(component)
	cfg.QPS = qps
	cfg.Burst = burst
	// Protobuf for built-in types: cheaper for the API server and for us.
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	return cfg, nil
}

// Clientset is Config followed by kubernetes.NewForConfig.
func Clientset(kubeconfig, component string, qps float32, burst int) (kubernetes.Interface, *rest.Config, error) {
	cfg, err := Config(kubeconfig, component, qps, burst)
	if err != nil {
		return nil, nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("client for %s: %w", kubeconfig, err)
	}
	return cs, cfg, nil
}
