package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/cgroups"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/rand"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/internal/components"
	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/controlplane"
	"github.com/microlet/microlet/internal/testenv/node"
)

// pressureNode is a node on the full control plane (kube-controller-manager
// runs the node lifecycle controller, which taints by condition) with
// short eviction periods and a node status computed every 2 s.
func pressureNode(t *testing.T, podsyncd ...string) *node.Node {
	t.Helper()
	args := append([]string{"--eviction-monitoring-period=1s", "--eviction-pressure-transition-period=45s",
		"--volume-stats-agg-period=1s"}, podsyncd...)
	return node.Start(t, node.Options{ControlPlane: controlplane.GetFull(t), Args: map[string][]string{
		components.PodSyncd: args, components.NodeStatusd: {"--node-status-update-frequency=2s"}}})
}

func nodeCondition(n *corev1.Node, typ corev1.NodeConditionType) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == typ {
			return c.Status
		}
	}
	return ""
}

func hasTaint(n *corev1.Node, key string) bool {
	for _, tn := range n.Spec.Taints {
		if tn.Key == key && tn.Effect == corev1.TaintEffectNoSchedule {
			return true
		}
	}
	return false
}

// waitPressure waits until the Node's condition typ is want and, unless
// key is empty, the controller manager's taint key is there (want True) or
// gone.
func waitPressure(n *node.Node, typ corev1.NodeConditionType, key string, want corev1.ConditionStatus) {
	n.T.Helper()
	n.Eventually(fmt.Sprintf("%s=%s and taint %q %v", typ, want, key, want == corev1.ConditionTrue), 4*time.Minute, func() (bool, string) {
		got, err := n.Admin.CoreV1().Nodes().Get(context.Background(), n.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		st, tainted := nodeCondition(got, typ), hasTaint(got, key)
		return st == want && (key == "" || tainted == (want == corev1.ConditionTrue)), fmt.Sprintf("%s=%s taints=%v", typ, st, got.Spec.Taints)
	})
}

// evictedEvent waits for the Warning Evicted event of a pod and returns its message.
func evictedEvent(n *node.Node, pod string) string {
	n.T.Helper()
	return warningEvent(n, pod, "Evicted")
}

// warningEvent waits for a Warning event with reason on a pod of the
// default namespace and returns its message.
func warningEvent(n *node.Node, pod, reason string) string {
	n.T.Helper()
	var msg string
	n.Eventually(reason+" event for default/"+pod, 2*time.Minute, func() (bool, string) {
		evs, err := n.Admin.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{
			FieldSelector: fields.Set{"involvedObject.name": pod, "reason": reason}.String()})
		if err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			if e.Type == corev1.EventTypeWarning {
				msg = e.Message
				return true, ""
			}
		}
		return false, "none yet"
	})
	return msg
}

func isEvicted(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodFailed && p.Status.Reason == "Evicted"
}

// checkEvicted checks the kubelet's marks on an evicted pod.
func checkEvicted(t *testing.T, p *corev1.Pod, msgPrefix string) {
	t.Helper()
	if !strings.HasPrefix(p.Status.Message, msgPrefix) {
		t.Errorf("%s: message %q, want prefix %q", p.Name, p.Status.Message, msgPrefix)
	}
	if c := condition(p, corev1.DisruptionTarget); c == nil || c.Status != corev1.ConditionTrue || c.Reason != "TerminationByKubelet" || c.Message != p.Status.Message {
		t.Errorf("%s: DisruptionTarget = %+v, want True/TerminationByKubelet with the message", p.Name, c)
	}
}

// scopedImages is podsyncd's image service in TestDiskPressureEviction: it
// forwards to runtime-shim but lists only this test's images (Docker is
// shared by every test on the machine, and the eviction manager's image
// reclaim removes every unused image it sees) and reports the test's small
// filesystem as the image filesystem, so imagefs and nodefs are one disk
// as on a single-disk node.
type scopedImages struct {
	runtimeapi.UnimplementedImageServiceServer
	up     runtimeapi.ImageServiceClient
	prefix string
	fs     string
}

func (s *scopedImages) ListImages(ctx context.Context, req *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	resp, err := s.up.ListImages(ctx, req)
	if err != nil {
		return nil, err
	}
	out := &runtimeapi.ListImagesResponse{}
	for _, im := range resp.Images {
		for _, tag := range im.RepoTags {
			if strings.HasPrefix(tag, s.prefix) {
				out.Images = append(out.Images, im)
				break
			}
		}
	}
	return out, nil
}

func (s *scopedImages) ImageStatus(ctx context.Context, req *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	return s.up.ImageStatus(ctx, req)
}

func (s *scopedImages) PullImage(ctx context.Context, req *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	return s.up.PullImage(ctx, req)
}

func (s *scopedImages) RemoveImage(ctx context.Context, req *runtimeapi.RemoveImageRequest) (*runtimeapi.RemoveImageResponse, error) {
	return s.up.RemoveImage(ctx, req)
}

func (s *scopedImages) ImageFsInfo(context.Context, *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	return &runtimeapi.ImageFsInfoResponse{ImageFilesystems: []*runtimeapi.FilesystemUsage{{
		Timestamp: time.Now().UnixNano(), FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: s.fs},
		UsedBytes: &runtimeapi.UInt64Value{}, InodesUsed: &runtimeapi.UInt64Value{}}}}, nil
}

// importImage makes a one-file image under name with `docker import`: an
// image no pod uses, with an ID of its own.
func importImage(t *testing.T, name string) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	body := []byte("unused\n")
	if err := tw.WriteHeader(&tar.Header{Name: "unused.txt", Mode: 0o644, Size: int64(len(body))}); err != nil {
		t.Fatal(err)
	}
	_, _ = tw.Write(body)
	_ = tw.Close()
	cmd := exec.Command("docker", "import", "-", name)
	cmd.Stdin = &buf
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("docker import: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", name).Run() })
}

func imageExists(name string) bool {
	return exec.Command("docker", "image", "inspect", name).Run() == nil
}

// mountTmpfs mounts a tmpfs of size at a new directory, unmounted when the
// test ends (after the node, whose cleanup was registered later).
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := testenv.ShortDir(t, "evfs")
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		testenv.RequireOrSkip(t, "mounting a tmpfs (CAP_SYS_ADMIN): %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// TestDiskPressureEviction fills a node's 64 MiB nodefs (podsyncd's data
// dir on a tmpfs, which the image service also reports as the image
// filesystem) past nodefs.available<24Mi with a pod writing 44 MiB into an
// emptyDir, and expects the kubelet's order: dead containers of a finished
// pod and an unused image are collected first, then, as that is not
// enough, the writing pod is evicted (Failed/Evicted, the message,
// DisruptionTarget, Warning Evicted event) while the quiet pod stays.
// DiskPressure shows on the Node with the controller manager's
// disk-pressure taint; a pod arriving meanwhile is refused; both clear
// once the evicted pod's space is back and the transition period passed.
func TestDiskPressureEviction(t *testing.T) {
	testenv.RequireRoot(t, "a tmpfs nodefs")
	fs := mountTmpfs(t, "64m")
	dataDir := filepath.Join(fs, "podsyncd")
	prefix := "microlet-evict-" + rand.String(6) + "/"
	unused := prefix + "unused:1"
	importImage(t, unused)

	// The scoped image service, on a socket of its own.
	sockDir := testenv.ShortDir(t, "evsock")
	sock := filepath.Join(sockDir, "img.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	proxy := &scopedImages{prefix: prefix, fs: fs}
	srv := grpc.NewServer()
	runtimeapi.RegisterImageServiceServer(srv, proxy)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	n := pressureNode(t, "--data-dir="+dataDir, "--image-endpoint=unix://"+sock,
		"--eviction-hard=nodefs.available=24Mi", "--image-minimum-gc-age=0s")
	up, err := grpcclient.Dial(components.Endpoint(n.RunDir, components.RuntimeShim))
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	proxy.up = runtimeapi.NewImageServiceClient(up)
	rt := runtimeapi.NewRuntimeServiceClient(up)
	containersOf := func(uid string) int {
		resp, err := rt.ListContainers(context.Background(), &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
			LabelSelector: map[string]string{"io.kubernetes.pod.uid": uid}}})
		if err != nil {
			t.Fatalf("CRI ListContainers: %v", err)
		}
		return len(resp.Containers)
	}

	// A finished pod whose dead container the reclaim removes (periodic
	// container GC keeps the newest of a pod that exists).
	done := n.Create(n.Pod("done", corev1.RestartPolicyNever, "true"))
	n.WaitPod("default", "done", "succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
	if c := containersOf(string(done.UID)); c == 0 {
		t.Fatalf("finished pod has no container left before the pressure")
	}
	quiet := n.Pod("quiet", corev1.RestartPolicyAlways, "sleep 3600")
	quiet.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceEphemeralStorage: resource.MustParse("10Mi")}
	n.Create(quiet)
	n.WaitPod("default", "quiet", "ready", ready)
	if !imageExists(unused) {
		t.Fatal("the unused image is gone before any pressure")
	}

	filler := n.Pod("filler", corev1.RestartPolicyAlways, "dd if=/dev/zero of=/data/fill bs=1048576 count=44 && sync && sleep 3600")
	filler.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	filler.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	n.Create(filler)

	waitPressure(n, corev1.NodeDiskPressure, "", corev1.ConditionTrue)
	// Admission under disk pressure refuses every pod.
	late := n.Pod("late", corev1.RestartPolicyAlways, "sleep 3600")
	late.Spec.Tolerations = []corev1.Toleration{{Key: corev1.TaintNodeDiskPressure, Operator: corev1.TolerationOpExists}}
	n.Create(late)
	waitPressure(n, corev1.NodeDiskPressure, corev1.TaintNodeDiskPressure, corev1.ConditionTrue)

	got := n.WaitPod("default", "filler", "evicted", isEvicted)
	t.Logf("filler: %s", got.Status.Message)
	checkEvicted(t, got, "The node was low on resource: ephemeral-storage. Threshold quantity: 24Mi, available: ")
	if msg := evictedEvent(n, "filler"); msg != got.Status.Message {
		t.Errorf("Evicted event message %q, status message %q", msg, got.Status.Message)
	}
	l := n.WaitPod("default", "late", "refused", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
	if l.Status.Reason != "Evicted" || l.Status.Message != "Pod was rejected: The node had condition: [DiskPressure]. " {
		t.Errorf("late pod: reason %q message %q, want Evicted / Pod was rejected: The node had condition: [DiskPressure]. ", l.Status.Reason, l.Status.Message)
	}

	// Node-level reclaim came first: podsyncd's log has the removed
	// containers and the removed image before the eviction.
	out := n.Out.String()
	iContainers := strings.Index(out, "eviction: removed unused containers")
	iImage := strings.Index(out, "image gc: removed image")
	iEvict := strings.Index(out, "eviction manager: evicting pod")
	if iContainers < 0 || iImage < 0 || iEvict < 0 || !(iContainers < iImage && iImage < iEvict) {
		t.Errorf("log positions: containers removed %d, image removed %d, eviction %d; want all, in that order", iContainers, iImage, iEvict)
	}
	if c := containersOf(string(done.UID)); c != 0 {
		t.Errorf("finished pod still has %d containers after the reclaim", c)
	}
	if imageExists(unused) {
		t.Errorf("unused image %s survived the reclaim", unused)
	}

	waitPressure(n, corev1.NodeDiskPressure, corev1.TaintNodeDiskPressure, corev1.ConditionFalse)
	// The quiet pod, within its request, was never evicted.
	q, err := n.Get("default", "quiet")
	if err != nil {
		t.Fatal(err)
	}
	if q.Status.Phase != corev1.PodRunning || isEvicted(q) {
		t.Errorf("quiet pod: phase %s reason %s, want Running", q.Status.Phase, q.Status.Reason)
	}
	if c := strings.Count(n.Out.String(), "eviction manager: evicting pod"); c != 1 {
		t.Errorf("%d evictions, want 1 (the filler)", c)
	}
}

// memoryCgroup makes a cgroup v1 memory cgroup to be a node's cgroup_root,
// limited to limit bytes, removed (in every controller) when the test ends.
func memoryCgroup(t *testing.T, limit int64) string {
	t.Helper()
	if _, err := os.Stat("/sys/fs/cgroup/memory/memory.limit_in_bytes"); err != nil {
		testenv.RequireOrSkip(t, "cgroup v1 memory controller at /sys/fs/cgroup/memory: %v", err)
	}
	root := "/microlet-evmem-" + rand.String(6)
	dir := filepath.Join("/sys/fs/cgroup/memory", root)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctrls, _ := os.ReadDir("/sys/fs/cgroup")
		for _, c := range ctrls {
			_ = cgroups.RemovePath(filepath.Join("/sys/fs/cgroup", c.Name(), root))
		}
	})
	if err := os.WriteFile(filepath.Join(dir, "memory.limit_in_bytes"), []byte(fmt.Sprint(limit)), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

// TestMemoryPressureEviction gives the node a cgroup root limited to
// 768 MiB (so the memory.available<500Mi threshold is crossed without
// touching the host) and runs a Guaranteed pod and a BestEffort hog that
// puts 350 MiB in a memory-backed emptyDir: the hog is evicted with the
// kubelet's memory message, the Guaranteed pod keeps running,
// MemoryPressure and the memory-pressure taint appear, a BestEffort pod
// arriving meanwhile is refused while a Burstable one and a BestEffort one
// tolerating the taint are admitted, and everything clears after the
// transition period.
func TestMemoryPressureEviction(t *testing.T) {
	testenv.RequireRoot(t, "a node cgroup with a memory limit")
	root := memoryCgroup(t, 768<<20)
	n := pressureNode(t, "--cgroup-root="+root, "--eviction-hard=memory.available=500Mi")

	g := n.Pod("mp-guaranteed", corev1.RestartPolicyAlways, "sleep 3600")
	g.Spec.Containers[0].Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("32Mi")}}
	n.Create(g)
	n.WaitPod("default", "mp-guaranteed", "ready", ready)

	limit := resource.MustParse("400Mi")
	hog := n.Pod("mp-hog", corev1.RestartPolicyAlways, "dd if=/dev/zero of=/mem/fill bs=1048576 count=350 && sleep 3600")
	hog.Spec.Volumes = []corev1.Volume{{Name: "mem", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
		Medium: corev1.StorageMediumMemory, SizeLimit: &limit}}}}
	hog.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "mem", MountPath: "/mem"}}
	n.Create(hog)

	waitPressure(n, corev1.NodeMemoryPressure, "", corev1.ConditionTrue)
	n.Create(n.Pod("late-besteffort", corev1.RestartPolicyAlways, "sleep 3600"))
	bu := n.Pod("late-burstable", corev1.RestartPolicyAlways, "sleep 3600")
	bu.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("8Mi")}
	bu.Spec.Tolerations = []corev1.Toleration{{Key: corev1.TaintNodeMemoryPressure, Operator: corev1.TolerationOpExists}}
	n.Create(bu)
	tol := n.Pod("late-tolerant", corev1.RestartPolicyAlways, "sleep 3600")
	tol.Spec.Tolerations = []corev1.Toleration{{Key: corev1.TaintNodeMemoryPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	n.Create(tol)
	waitPressure(n, corev1.NodeMemoryPressure, corev1.TaintNodeMemoryPressure, corev1.ConditionTrue)

	got := n.WaitPod("default", "mp-hog", "evicted", isEvicted)
	t.Logf("hog: %s", got.Status.Message)
	checkEvicted(t, got, "The node was low on resource: memory. Threshold quantity: 500Mi, available: ")
	if !strings.Contains(got.Status.Message, "Container main was using ") || !strings.HasSuffix(got.Status.Message, ", request is 0, has larger consumption of memory. ") {
		t.Errorf("hog message %q does not blame container main over its request 0", got.Status.Message)
	}
	if msg := evictedEvent(n, "mp-hog"); msg != got.Status.Message {
		t.Errorf("Evicted event message %q, status message %q", msg, got.Status.Message)
	}
	lb := n.WaitPod("default", "late-besteffort", "refused", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
	if lb.Status.Reason != "Evicted" || lb.Status.Message != "Pod was rejected: The node had condition: [MemoryPressure]. " {
		t.Errorf("late BestEffort pod: reason %q message %q", lb.Status.Reason, lb.Status.Message)
	}
	n.WaitPod("default", "late-burstable", "ready", ready)
	n.WaitPod("default", "late-tolerant", "ready", ready)

	waitPressure(n, corev1.NodeMemoryPressure, corev1.TaintNodeMemoryPressure, corev1.ConditionFalse)
	gp, err := n.Get("default", "mp-guaranteed")
	if err != nil {
		t.Fatal(err)
	}
	if gp.Status.Phase != corev1.PodRunning || isEvicted(gp) {
		t.Errorf("Guaranteed pod: phase %s reason %s, want Running", gp.Status.Phase, gp.Status.Reason)
	}
	if c := strings.Count(n.Out.String(), "eviction manager: evicting pod"); c != 1 {
		t.Errorf("%d evictions, want 1 (the hog)", c)
	}
}
