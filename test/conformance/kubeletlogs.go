package conformance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// The kubelet's log directories, hard-coded in specs of the node suite
// (ContainerLogPath reads a pod's log there from another pod that mounts
// them).
const (
	KubeletPodLogsDir    = "/var/log/pods"
	KubeletLogSymlinkDir = "/var/log/containers"
)

// podUIDs records the UID of every pod bound to one node, and the static
// pod UID behind every mirror pod, from when it starts: the log dirs of
// exactly these pods are the run's to remove from the shared /var/log.
type podUIDs struct {
	stop chan struct{}
	// made are the log directories that did not exist before the node
	// started: removeLogs removes them when nothing else is left in them.
	made []string

	mu   sync.Mutex
	uids map[types.UID]bool
}

// recordPodUIDs starts recording the pods bound to node, whose logs go to
// dirs.
func recordPodUIDs(ctx context.Context, client kubernetes.Interface, node string, dirs ...string) (*podUIDs, error) {
	r := &podUIDs{stop: make(chan struct{}), uids: map[types.UID]bool{}}
	for _, d := range dirs {
		if _, err := os.Stat(d); errors.Is(err, os.ErrNotExist) {
			r.made = append(r.made, d)
		}
	}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
	}))
	inf := factory.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    r.add,
		UpdateFunc: func(_, obj any) { r.add(obj) },
	}); err != nil {
		return nil, err
	}
	factory.Start(r.stop)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		close(r.stop)
		return nil, fmt.Errorf("pods of node %s: informer never synced", node)
	}
	return r, nil
}

func (r *podUIDs) add(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.uids[p.UID] = true
	if static := p.Annotations[corev1.MirrorPodAnnotationKey]; static != "" {
		r.uids[types.UID(static)] = true
	}
}

// removeLogs stops recording and removes the recorded pods' log dirs under
// podLogs (<namespace>_<name>_<uid>), the symlinks under symlinks that
// point into them, and the two dirs themselves when the node made them and
// they are empty; it reports what it could not remove.
func (r *podUIDs) removeLogs(podLogs, symlinks string) error {
	close(r.stop)
	r.mu.Lock()
	defer r.mu.Unlock()
	entries, err := os.ReadDir(podLogs)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	var errs []error
	var removed []string
	for _, e := range entries {
		i := strings.LastIndex(e.Name(), "_")
		if i < 0 || !r.uids[types.UID(e.Name()[i+1:])] {
			continue
		}
		dir := filepath.Join(podLogs, e.Name())
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, dir+string(filepath.Separator))
	}
	links, err := os.ReadDir(symlinks)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	for _, l := range links {
		p := filepath.Join(symlinks, l.Name())
		target, err := os.Readlink(p)
		if err != nil {
			continue // not a symlink
		}
		for _, dir := range removed {
			if strings.HasPrefix(target, dir) {
				if err := os.Remove(p); err != nil {
					errs = append(errs, err)
				}
				break
			}
		}
	}
	for _, d := range r.made {
		_ = os.Remove(d) // only when empty
	}
	return errors.Join(errs...)
}
