package node

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"

	"github.com/microlet/microlet/internal/testenv/controlplane"
)

func TestMain(m *testing.M) { os.Exit(controlplane.Main(m)) }

// TestDeploymentOnNode: a real microlet node in the cluster GetFull runs
// the pod of a Deployment. The namespace, its ServiceAccount and the
// kube-root-ca.crt the pod's token volume projects come from the
// controller manager, the ReplicaSet and the pod from its controllers, the
// binding from the scheduler; deleting the Deployment removes the pod
// through the garbage collector and the node.
func TestDeploymentOnNode(t *testing.T) {
	cp := controlplane.GetFull(t)
	n := Start(t, Options{ControlPlane: cp})
	ctx := context.Background()
	ns := "cluster-" + rand.String(5)
	if _, err := n.Admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Admin.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })

	sel := map[string]string{"app": "sleeper"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "sleeper", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: sel},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To[int64](2),
					Containers: []corev1.Container{{
						Name: "main", Image: n.Image, ImagePullPolicy: corev1.PullIfNotPresent,
						Command: []string{"/bin/sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"},
					}},
				},
			},
		},
	}
	if _, err := n.Admin.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	list := func() ([]corev1.Pod, error) {
		pods, err := n.Admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(sel).String()})
		if err != nil {
			return nil, err
		}
		return pods.Items, nil
	}
	n.Eventually("the Deployment's pod running and ready on "+n.Name, 5*time.Minute, func() (bool, string) {
		pods, err := list()
		if err != nil {
			return false, err.Error()
		}
		if len(pods) != 1 {
			return false, fmt.Sprintf("%d pods", len(pods))
		}
		p := pods[0]
		return p.Spec.NodeName == n.Name && p.Status.Phase == corev1.PodRunning && Ready(&p),
			fmt.Sprintf("pod %s on %q: phase %s, conditions %+v", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.Conditions)
	})

	fg := metav1.DeletePropagationForeground
	if err := n.Admin.AppsV1().Deployments(ns).Delete(ctx, dep.Name, metav1.DeleteOptions{PropagationPolicy: &fg}); err != nil {
		t.Fatal(err)
	}
	n.Eventually("the Deployment and its pod gone", 5*time.Minute, func() (bool, string) {
		pods, err := list()
		if err != nil {
			return false, err.Error()
		}
		_, derr := n.Admin.AppsV1().Deployments(ns).Get(ctx, dep.Name, metav1.GetOptions{})
		return len(pods) == 0 && apierrors.IsNotFound(derr), fmt.Sprintf("%d pods; deployment: %v", len(pods), derr)
	})
}
