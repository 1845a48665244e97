package kubeclient

import (
	"errors"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/transport"

	"github.com/microlet/microlet/internal/version"
)

// InCluster is the kubeconfig value that selects the in-cluster service account.
const InCluster = "in-cluster"

// CertReloadInterval is how often a client whose kubeconfig names its
// certificate and key by file (the node's kubeconfig written by
// internal/nodecreds) reads them again. client-go does the reading: when
// the pair changed it closes every connection, and requests and watches go
// on over new connections with the new certificate. Its default, 5 minutes,
// is too slow for short-lived node certificates: a renewed certificate may
// leave the old one less than a minute.
const CertReloadInterval = 15 * time.Second

func init() { transport.CertCallbackRefreshDuration = CertReloadInterval }

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
