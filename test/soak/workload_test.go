package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/microlet/microlet/internal/testenv/node"
)

// kind is one shape of pod the churn creates: what it runs and the state
// its spec asks for.
type kind struct {
	name   string
	weight int
	// life is how long the pod lives before the churn deletes it, at least.
	life [2]time.Duration
	// build returns the pod.
	build func(n *node.Node, name string) *corev1.Pod
	// reached says whether the pod is in the state its spec asks for, and
	// what it is in otherwise.
	reached func(p *corev1.Pod) (bool, string)
	// healthy pods keep their running container: once Ready, its ID and
	// restart count must not change while the pod exists.
	healthy bool
}

// Labels of every soak pod: which run made it and its kind.
const (
	labelRun  = "soak.microlet.io/run"
	labelKind = "soak.microlet.io/kind"
)

// untilTerm runs until SIGTERM, then exits 0 at once: the pods stop
// within their grace period without waiting it out.
const untilTerm = "trap 'exit 0' TERM; while true; do sleep 1; done"

// kinds are the pod shapes: a service pod with an init container, probes
// and configMap/secret/emptyDir volumes; batch pods that succeed, succeed
// on a retry (OnFailure) or fail (Never); and a crash-looping pod.
var kinds = []kind{
	{
		name: "web", weight: 40, life: [2]time.Duration{40 * time.Second, 100 * time.Second}, healthy: true,
		build: func(n *node.Node, name string) *corev1.Pod {
			p := n.Pod(name, corev1.RestartPolicyAlways, "test -f /work/ready && grep -q soak /config/greeting && "+untilTerm)
			withVolumes(p)
			p.Spec.InitContainers = []corev1.Container{{
				Name: "init", Image: n.Image, ImagePullPolicy: corev1.PullIfNotPresent,
				Command:      []string{"/bin/sh", "-c", "cat /secret/token > /work/ready"},
				VolumeMounts: p.Spec.Containers[0].VolumeMounts,
			}}
			exec := func(cmd string) corev1.ProbeHandler {
				return corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"/bin/sh", "-c", cmd}}}
			}
			c := &p.Spec.Containers[0]
			// The runtime bounds an exec probe by its timeoutSeconds (1 s
			// by default) from the exec's start. On two shared cores with
			// Docker busy (make test runs another package beside this one)
			// an exec of `true` can take longer, and three such runs in a
			// row restart the container, in the kubelet as in microlet;
			// one CI run restarted every web pod within seconds. The
			// invariant is about the node's faults, not the machine's
			// speed: a hung exec still fails, after 10 s.
			c.ReadinessProbe = &corev1.Probe{ProbeHandler: exec("test -f /work/ready"), PeriodSeconds: 2, TimeoutSeconds: 10}
			c.LivenessProbe = &corev1.Probe{ProbeHandler: exec("true"), PeriodSeconds: 5, TimeoutSeconds: 10, FailureThreshold: 3}
			return p
		},
		reached: func(p *corev1.Pod) (bool, string) {
			return p.Status.Phase == corev1.PodRunning && node.Ready(p), describe(p)
		},
	},
	{
		name: "job", weight: 15, life: [2]time.Duration{20 * time.Second, 60 * time.Second},
		build: func(n *node.Node, name string) *corev1.Pod {
			return n.Pod(name, corev1.RestartPolicyNever, "sleep 3; exit 0")
		},
		reached: func(p *corev1.Pod) (bool, string) { return p.Status.Phase == corev1.PodSucceeded, describe(p) },
	},
	{
		name: "retry", weight: 15, life: [2]time.Duration{30 * time.Second, 70 * time.Second},
		build: func(n *node.Node, name string) *corev1.Pod {
			// Fails once, then succeeds: the marker lives in an emptyDir,
			// which outlives the container's restart.
			p := n.Pod(name, corev1.RestartPolicyOnFailure, "if test -f /work/failed; then exit 0; fi; touch /work/failed; exit 1")
			withVolumes(p)
			return p
		},
		reached: func(p *corev1.Pod) (bool, string) {
			return p.Status.Phase == corev1.PodSucceeded && restarts(p) >= 1, describe(p)
		},
	},
	{
		name: "fail", weight: 10, life: [2]time.Duration{20 * time.Second, 60 * time.Second},
		build: func(n *node.Node, name string) *corev1.Pod {
			return n.Pod(name, corev1.RestartPolicyNever, "exit 3")
		},
		reached: func(p *corev1.Pod) (bool, string) {
			return p.Status.Phase == corev1.PodFailed && exitCode(p) == 3, describe(p)
		},
	},
	{
		name: "crashloop", weight: 20, life: [2]time.Duration{30 * time.Second, 90 * time.Second},
		build: func(n *node.Node, name string) *corev1.Pod {
			return n.Pod(name, corev1.RestartPolicyAlways, "sleep 1; exit 1")
		},
		reached: func(p *corev1.Pod) (bool, string) {
			return p.Status.Phase == corev1.PodRunning && !node.Ready(p) && restarts(p) >= 1, describe(p)
		},
	},
}

// kindNamed is the kind called name.
func kindNamed(name string) *kind {
	for i := range kinds {
		if kinds[i].name == name {
			return &kinds[i]
		}
	}
	return nil
}

// pick draws a kind by weight.
func pick(r *rand.Rand) *kind {
	total := 0
	for _, k := range kinds {
		total += k.weight
	}
	x := r.IntN(total)
	for i := range kinds {
		if x < kinds[i].weight {
			return &kinds[i]
		}
		x -= kinds[i].weight
	}
	return &kinds[len(kinds)-1]
}

// Names of the configMap and secret every pod with volumes mounts.
const (
	configName = "soak-config"
	secretName = "soak-secret"
)

// withVolumes mounts an emptyDir at /work, the soak configMap at /config
// and the soak secret at /secret into the pod's container.
func withVolumes(p *corev1.Pod) {
	p.Spec.Volumes = []corev1.Volume{
		{Name: "work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: configName}}}},
		{Name: "secret", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secretName}}},
	}
	p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{
		{Name: "work", MountPath: "/work"},
		{Name: "config", MountPath: "/config", ReadOnly: true},
		{Name: "secret", MountPath: "/secret", ReadOnly: true},
	}
}

// restarts sums the restart counts of the pod's containers.
func restarts(p *corev1.Pod) int32 {
	var n int32
	for _, cs := range p.Status.ContainerStatuses {
		n += cs.RestartCount
	}
	return n
}

// exitCode is the main container's last exit code, -1 before it ends.
func exitCode(p *corev1.Pod) int32 {
	for _, cs := range p.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil && cs.Name == "main" {
			return t.ExitCode
		}
	}
	return -1
}

// describe is the pod's status in one line.
func describe(p *corev1.Pod) string {
	var b strings.Builder
	fmt.Fprintf(&b, "phase=%s ready=%v", p.Status.Phase, node.Ready(p))
	if p.Status.Reason != "" {
		fmt.Fprintf(&b, " reason=%s message=%q", p.Status.Reason, p.Status.Message)
	}
	for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		fmt.Fprintf(&b, " %s{restarts=%d", cs.Name, cs.RestartCount)
		switch s := cs.State; {
		case s.Running != nil:
			b.WriteString(" running")
		case s.Waiting != nil:
			fmt.Fprintf(&b, " waiting %s", s.Waiting.Reason)
		case s.Terminated != nil:
			fmt.Fprintf(&b, " exited %d %s", s.Terminated.ExitCode, s.Terminated.Reason)
		}
		if t := cs.LastTerminationState.Terminated; t != nil {
			fmt.Fprintf(&b, " last{exited %d %s at %s}", t.ExitCode, t.Reason, t.FinishedAt.UTC().Format("15:04:05"))
		}
		b.WriteString("}")
	}
	return b.String()
}

// tracked is one pod the churn created.
type tracked struct {
	name     string
	uid      types.UID
	kind     *kind
	deleteAt time.Time
	// deleted is when a delete call for it returned, zero before.
	deleted time.Time
}

// churn creates and deletes pods continuously, keeping about target pods
// alive, and remembers every pod it created.
type churn struct {
	n      *node.Node
	run    string
	target int
	rand   *rand.Rand

	mu      sync.Mutex
	pods    map[string]*tracked
	seq     int
	created int
	// deletedReached counts the pods the churn deleted that had reached
	// the state their spec asks for, deletedAll all it deleted.
	deletedReached, deletedAll int
	// errors counts API calls that failed (expected while the API server
	// is stopped), by verb.
	errors map[string]int
}

func newChurn(n *node.Node, run string, target int, seed uint64) *churn {
	return &churn{n: n, run: run, target: target, rand: rand.New(rand.NewPCG(seed, seed^0x5eed)),
		pods: map[string]*tracked{}, errors: map[string]int{}}
}

// loop runs a tick every 2 s until ctx ends.
func (c *churn) loop(ctx context.Context) { wait.UntilWithContext(ctx, c.tick, 2*time.Second) }

// apiCtx bounds one API call, so a stopped API server only delays a tick.
func apiCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, 10*time.Second)
}

// tick adopts pods a timed-out create made after all, deletes the pods
// whose time is up and creates new ones up to the target.
func (c *churn) tick(ctx context.Context) {
	cctx, cancel := apiCtx(ctx)
	list, err := c.n.Admin.CoreV1().Pods(metav1.NamespaceDefault).List(cctx, metav1.ListOptions{LabelSelector: labelRun + "=" + c.run})
	cancel()
	if err != nil {
		c.failed("list")
		return
	}
	now := time.Now()
	byName := map[string]*corev1.Pod{}
	c.mu.Lock()
	for i := range list.Items {
		p := &list.Items[i]
		byName[p.Name] = p
		if t, ok := c.pods[p.Name]; ok {
			t.uid = p.UID
			continue
		}
		// A create that timed out on the client but reached the API
		// server: the pod is ours, and its time is up.
		c.pods[p.Name] = &tracked{name: p.Name, uid: p.UID, kind: kindNamed(p.Labels[labelKind]), deleteAt: now}
		c.created++
	}
	var expired []string
	alive := 0
	for _, t := range c.pods {
		if !t.deleted.IsZero() {
			continue
		}
		if now.After(t.deleteAt) {
			expired = append(expired, t.name)
			continue
		}
		alive++
	}
	c.mu.Unlock()
	for _, name := range expired {
		dctx, cancel := apiCtx(ctx)
		err := c.n.Admin.CoreV1().Pods(metav1.NamespaceDefault).Delete(dctx, name, metav1.DeleteOptions{})
		cancel()
		if err != nil && !apierrors.IsNotFound(err) {
			c.failed("delete")
			continue
		}
		c.mu.Lock()
		t := c.pods[name]
		t.deleted = time.Now()
		c.deletedAll++
		if p := byName[name]; p != nil && t.kind != nil {
			if ok, _ := t.kind.reached(p); ok {
				c.deletedReached++
			}
		}
		c.mu.Unlock()
	}
	for ; alive < c.target; alive++ {
		c.create(ctx)
	}
}

// create creates one pod of a random kind.
func (c *churn) create(ctx context.Context) {
	c.mu.Lock()
	k := pick(c.rand)
	c.seq++
	name := fmt.Sprintf("%s-%s-%03d", c.run, k.name, c.seq)
	life := k.life[0] + time.Duration(c.rand.Int64N(int64(k.life[1]-k.life[0])))
	c.mu.Unlock()
	p := k.build(c.n, name)
	p.Labels = map[string]string{labelRun: c.run, labelKind: k.name}
	grace := int64(10)
	p.Spec.TerminationGracePeriodSeconds = &grace
	cctx, cancel := apiCtx(ctx)
	got, err := c.n.Admin.CoreV1().Pods(p.Namespace).Create(cctx, p, metav1.CreateOptions{})
	cancel()
	if err != nil {
		c.failed("create")
		return
	}
	c.mu.Lock()
	c.pods[name] = &tracked{name: name, uid: got.UID, kind: k, deleteAt: time.Now().Add(life)}
	c.created++
	c.mu.Unlock()
}

func (c *churn) failed(verb string) {
	c.mu.Lock()
	c.errors[verb]++
	c.mu.Unlock()
}

// snapshot copies the tracked pods.
func (c *churn) snapshot() []tracked {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]tracked, 0, len(c.pods))
	for _, t := range c.pods {
		out = append(out, *t)
	}
	return out
}
