package envvars

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/microlet/microlet/internal/podsource"
)

// Services lists the Services whose addresses containers get as
// environment variables (service links).
type Services interface {
	// List returns every Service the node knows.
	List() ([]*corev1.Service, error)
	// HasSynced says whether the first full list has arrived.
	HasSynced() bool
}

// masterService is always linked, from the default namespace.
const masterService = "kubernetes"

// ServiceEnv is the docker-links style environment of the Services a pod
// sees: the master service "kubernetes" of the default namespace always,
// and with enableServiceLinks (the default) every Service of the pod's own
// namespace that has a cluster IP. An API pod waits until the Services have
// been listed once, as the kubelet does, so KUBERNETES_SERVICE_HOST is not
// missed after a restart; static pods do not wait.
func ServiceEnv(pod *corev1.Pod, svcs Services) (map[string]string, error) {
	out := map[string]string{}
	if svcs == nil {
		return out, nil // no API server: no services
	}
	if !svcs.HasSynced() && !podsource.IsStatic(pod) {
		return nil, fmt.Errorf("services have not yet been read at least once, cannot construct envvars")
	}
	list, err := svcs.List()
	if err != nil {
		return nil, fmt.Errorf("failed to list services when setting up env vars: %w", err)
	}
	links := pod.Spec.EnableServiceLinks == nil || *pod.Spec.EnableServiceLinks
	chosen := map[string]*corev1.Service{}
	for _, s := range list {
		if !clusterIPSet(s) {
			continue
		}
		switch {
		case s.Namespace == metav1.NamespaceDefault && s.Name == masterService:
			if _, ok := chosen[s.Name]; !ok {
				chosen[s.Name] = s
			}
		case s.Namespace == pod.Namespace && links:
			chosen[s.Name] = s
		}
	}
	for _, s := range chosen {
		for _, v := range FromService(s) {
			out[v.Name] = v.Value
		}
	}
	return out, nil
}

func clusterIPSet(s *corev1.Service) bool {
	return s.Spec.ClusterIP != corev1.ClusterIPNone && s.Spec.ClusterIP != "" && len(s.Spec.Ports) > 0
}

func envName(s string) string { return strings.ToUpper(strings.ReplaceAll(s, "-", "_")) }

// FromService is one Service's variables: <NAME>_SERVICE_HOST,
// <NAME>_SERVICE_PORT (the first port) and _SERVICE_PORT_<PORTNAME> for
// named ports, and the docker-links <NAME>_PORT, <NAME>_PORT_<port>_<PROTO>
// with _PROTO, _PORT and _ADDR.
func FromService(s *corev1.Service) []Var {
	if !clusterIPSet(s) {
		return nil
	}
	prefix := envName(s.Name)
	ip := s.Spec.ClusterIP
	out := []Var{
		{prefix + "_SERVICE_HOST", ip},
		{prefix + "_SERVICE_PORT", strconv.Itoa(int(s.Spec.Ports[0].Port))},
	}
	for _, p := range s.Spec.Ports {
		if p.Name != "" {
			out = append(out, Var{prefix + "_SERVICE_PORT_" + envName(p.Name), strconv.Itoa(int(p.Port))})
		}
	}
	for i, p := range s.Spec.Ports {
		proto := string(corev1.ProtocolTCP)
		if p.Protocol != "" {
			proto = string(p.Protocol)
		}
		port := strconv.Itoa(int(p.Port))
		url := strings.ToLower(proto) + "://" + net.JoinHostPort(ip, port)
		if i == 0 {
			out = append(out, Var{prefix + "_PORT", url})
		}
		pp := prefix + "_PORT_" + port + "_" + strings.ToUpper(proto)
		out = append(out, Var{pp, url}, Var{pp + "_PROTO", strings.ToLower(proto)}, Var{pp + "_PORT", port}, Var{pp + "_ADDR", ip})
	}
	return out
}

// sortedKeys orders the service variables so container configs are stable.
func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// InformerServices follows every Service through a shared informer (the
// Node authorizer lets a node list and watch Services).
type InformerServices struct {
	factory informers.SharedInformerFactory
	lister  corelisters.ServiceLister
	synced  cache.InformerSynced
}

var _ Services = (*InformerServices)(nil)

// NewInformerServices returns an informer-backed Services; call Start.
func NewInformerServices(client kubernetes.Interface) *InformerServices {
	f := informers.NewSharedInformerFactory(client, 0)
	inf := f.Core().V1().Services()
	return &InformerServices{factory: f, lister: inf.Lister(), synced: inf.Informer().HasSynced}
}

// Start runs the informer until ctx ends.
func (s *InformerServices) Start(ctx context.Context) { s.factory.Start(ctx.Done()) }

// List implements Services.
func (s *InformerServices) List() ([]*corev1.Service, error) {
	return s.lister.List(labels.Everything())
}

// HasSynced implements Services.
func (s *InformerServices) HasSynced() bool { return s.synced() }
