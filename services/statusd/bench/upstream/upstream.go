// Package upstream wraps k8s.io/kubernetes/pkg/kubelet/status, the kubelet's
// own status manager, so the benchmark can drive it with the same workload
// as statusd's syncer.
package upstream

import (
	"context"
	"log/slog"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/status"
	kubetypes "k8s.io/kubernetes/pkg/kubelet/types"
)

// pods is the minimal pod manager the status manager asks: regular pods only.
type pods struct {
	mu  sync.RWMutex
	byU map[types.UID]*corev1.Pod
}

func (p *pods) GetPodByUID(uid types.UID) (*corev1.Pod, bool) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	x, ok := p.byU[uid]
	return x, ok
}
func (p *pods) GetMirrorPodByPod(*corev1.Pod) (*corev1.Pod, bool) { return nil, false }
func (p *pods) TranslatePodUID(uid types.UID) kubetypes.ResolvedPodUID {
	return kubetypes.ResolvedPodUID(uid)
}
func (p *pods) GetUIDTranslations() (map[kubetypes.ResolvedPodUID]kubetypes.MirrorPodUID, map[kubetypes.MirrorPodUID]kubetypes.ResolvedPodUID) {
	return map[kubetypes.ResolvedPodUID]kubetypes.MirrorPodUID{}, map[kubetypes.MirrorPodUID]kubetypes.ResolvedPodUID{}
}

type safety struct{}

func (safety) PodCouldHaveRunningContainers(*corev1.Pod) bool { return true }

type latency struct{}

func (latency) RecordStatusUpdated(*corev1.Pod) {}
func (latency) DeletePodStartupState(types.UID) {}

// Manager is upstream's status manager with a trivial pod manager.
type Manager struct {
	m    status.Manager
	pods *pods
}

// New returns upstream's manager over client for the given pods. klog's
// output is discarded: upstream logs every cancelled request at shutdown.
func New(client kubernetes.Interface, podList []*corev1.Pod) *Manager {
	klog.SetSlogLogger(slog.New(slog.DiscardHandler))
	p := &pods{byU: map[types.UID]*corev1.Pod{}}
	for _, x := range podList {
		p.byU[x.UID] = x
	}
	return &Manager{m: status.NewManager(client, p, safety{}, latency{}), pods: p}
}

// Start starts the manager's sync loop.
func (m *Manager) Start(ctx context.Context) { m.m.Start(ctx) }

// SetPodStatus hands a status to upstream's manager.
func (m *Manager) SetPodStatus(pod *corev1.Pod, st *corev1.PodStatus) {
	m.m.SetPodStatus(klog.Background(), pod, *st)
}
