package setters

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"

	"github.com/microlet/microlet/internal/evictionapi"
	"github.com/microlet/microlet/services/nodestatusd/internal/host"
	"github.com/microlet/microlet/services/nodestatusd/internal/sources"
)

// Setter fills part of a Node's status in place.
type Setter func(ctx context.Context, node *corev1.Node) error

// Limits the kubelet applies to the images list.
const (
	// DefaultMaxImages is the kubelet's --node-status-max-images.
	DefaultMaxImages = 50
	// MaxNamesPerImage is the kubelet's cap on names per image.
	MaxNamesPerImage = 5
	// DefaultMaxPods is the kubelet's --max-pods.
	DefaultMaxPods = 110
	// DefaultDaemonPort is the kubelet's --port, advertised in daemonEndpoints.
	DefaultDaemonPort = 10250
)

// Reasons and messages of the conditions, in the kubelet's words so that
// tools that key on them keep working.
const (
	ReasonReady    = "KubeletReady"
	ReasonNotReady = "KubeletNotReady"
	MessageReady   = "kubelet is posting ready status"
)

// Inputs is what the setters read. Functions may be shared between nodes.
type Inputs struct {
	// Now is the clock.
	Now func() time.Time
	// Hostname is the node's hostname (the node name for simulated nodes).
	Hostname string
	// NodeIPs are --node-ip; empty means detect.
	NodeIPs []net.IP
	// Facts are the host's static facts.
	Facts host.Facts
	// Stats measures the host now (capacity of ephemeral-storage, pressure).
	Stats func() (host.Stats, error)
	// Runtime reads the CRI; nil means no runtime is configured.
	Runtime func(ctx context.Context) sources.RuntimeState
	// RuntimeEndpoint names the CRI socket in messages.
	RuntimeEndpoint string
	// PodCIDR hands the Node's spec.podCIDRs (comma-separated) to the
	// runtime; nil means nobody to tell.
	PodCIDR func(ctx context.Context, cidrs string) error
	// Cloud reads cloudsyncd; nil means none.
	Cloud func(ctx context.Context) sources.CloudState
	// Pressure judges the host's stats.
	Pressure *Pressure
	// Devices reads the device plugins' extended resources; nil means
	// none.
	Devices *Devices
	// EvictionHard are the hard thresholds subtracted from allocatable.
	EvictionHard []evictionapi.Threshold
	// Reserved is kube-reserved plus system-reserved.
	Reserved corev1.ResourceList
	// MaxPods is the pods capacity.
	MaxPods int64
	// MaxImages caps status.images; negative means no cap.
	MaxImages int
	// DaemonPort is the advertised kubelet endpoint port while KubeletAPI
	// has no answer.
	DaemonPort int32
	// KubeletAPI reads nodeapi's serving port; nil means none.
	KubeletAPI func(ctx context.Context) sources.NodeAPIState
	// Version is reported as kubeletVersion: the Kubernetes release the
	// agent implements (version.Kubernetes), which clients parse as the
	// kubelet's; microlet's own version is a Node annotation.
	Version string
	// Extra conditions reported by other components.
	Extra *Conditions
	// ReadyErrors are other components' reasons for NotReady (nil: none).
	ReadyErrors *ReadyErrors
	// Machine, when set, keeps MachineInfo's lists between syncs; the
	// Nodes then share them and must not change them.
	Machine *MachineCache
}

// Defaults returns the setters in the kubelet's order, Ready last among the
// conditions and the declared features after all of them.
func Defaults(in *Inputs) []Setter {
	return []Setter{
		PodCIDR(in),
		NodeAddress(in),
		MachineInfo(in),
		NodeInfo(in),
		DaemonEndpoints(in),
		Images(in),
		RuntimeFeatures(in),
		RuntimeHandlers(in),
		PressureConditions(in),
		in.Extra.Setter(in.Now),
		ReadyCondition(in),
		DeclaredFeatures(in),
	}
}

// PodCIDR sets nothing: it passes the Node's pod CIDRs to the runtime
// before the status is computed, where the kubelet's status sync calls
// updatePodCIDR, so a runtime that builds its pod network from them can
// turn NetworkReady true in this very sync.
func PodCIDR(in *Inputs) Setter {
	return func(ctx context.Context, node *corev1.Node) error {
		if in.PodCIDR == nil || len(node.Spec.PodCIDRs) == 0 {
			return nil
		}
		return in.PodCIDR(ctx, strings.Join(node.Spec.PodCIDRs, ","))
	}
}

// NodeAddress sets the addresses: the cloud's when cloudsyncd has them, else
// --node-ip, else the hostname's or the default-route interface's address;
// always with the Hostname address.
func NodeAddress(in *Inputs) Setter {
	return func(ctx context.Context, node *corev1.Node) error {
		if in.Cloud != nil {
			cs := in.Cloud(ctx)
			if cs.Err == nil && !cs.NotConfigured && len(cs.Addresses) > 0 {
				node.Status.Addresses = withHostname(filterByNodeIP(cs.Addresses, in.NodeIPs), in.Hostname)
				return nil
			}
		}
		ips := in.NodeIPs
		if len(ips) == 0 {
			ip, err := detectIP(in.Hostname)
			if err != nil {
				return fmt.Errorf("node address: %w", err)
			}
			ips = []net.IP{ip}
		}
		var addrs []corev1.NodeAddress
		for _, ip := range ips {
			addrs = append(addrs, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip.String()})
		}
		node.Status.Addresses = withHostname(addrs, in.Hostname)
		return nil
	}
}

// filterByNodeIP keeps the cloud's addresses but puts --node-ip's first, as
// the kubelet does when both are given.
func filterByNodeIP(addrs []corev1.NodeAddress, nodeIPs []net.IP) []corev1.NodeAddress {
	if len(nodeIPs) == 0 {
		return addrs
	}
	want := nodeIPs[0].String()
	out := make([]corev1.NodeAddress, 0, len(addrs))
	for _, a := range addrs {
		if a.Address == want {
			out = append([]corev1.NodeAddress{a}, out...)
		} else {
			out = append(out, a)
		}
	}
	return out
}

func withHostname(addrs []corev1.NodeAddress, hostname string) []corev1.NodeAddress {
	out := append([]corev1.NodeAddress(nil), addrs...)
	for _, a := range out {
		if a.Type == corev1.NodeHostName {
			return out
		}
	}
	if hostname != "" {
		out = append(out, corev1.NodeAddress{Type: corev1.NodeHostName, Address: hostname})
	}
	return out
}

// detected caches detectIP per hostname for a minute: resolving on every
// sync of every simulated node would flood the resolver, and a node's
// address rarely moves faster than that.
var detected = struct {
	sync.Mutex
	m map[string]detection
}{m: map[string]detection{}}

type detection struct {
	ip  net.IP
	err error
	at  time.Time
}

const detectTTL = time.Minute

// detectIP is the kubelet's fallback: the hostname's first non-loopback
// address, else the address of the default-route interface.
//
// The lock guards only the map, never a lookup: a resolver that takes a
// second to say NXDOMAIN must not hold up every other simulated node.
func detectIP(hostname string) (net.IP, error) {
	detected.Lock()
	d, ok := detected.m[hostname]
	detected.Unlock()
	if ok && time.Since(d.at) < detectTTL {
		return d.ip, d.err
	}
	ip, err := lookupIP(hostname)
	detected.Lock()
	detected.m[hostname] = detection{ip: ip, err: err, at: time.Now()}
	detected.Unlock()
	return ip, err
}

func lookupIP(hostname string) (net.IP, error) {
	if ips, err := net.LookupIP(hostname); err == nil {
		for _, ip := range ips {
			if !ip.IsLoopback() && !ip.IsLinkLocalUnicast() && ip.To4() != nil {
				return ip, nil
			}
		}
	}
	ip, err := utilnet.ChooseHostInterface()
	if err != nil {
		return nil, fmt.Errorf("no --node-ip, hostname %q has no usable address and no default route: %w", hostname, err)
	}
	return ip, nil
}

// MachineInfo sets capacity and allocatable: cpu, memory, hugepages,
// ephemeral-storage and pods, allocatable minus reserved and minus the hard
// eviction thresholds (memory and nodefs) and hugepages from memory, plus
// the extended resources of device plugins (in.Devices) as the kubelet's
// setter adds its device manager's.
//
// The lists depend only on the inputs and the filesystem's size, so the last
// pair is kept in in.Machine (when set) and shared, read-only, by every
// sync of every node that shares the Inputs.
func MachineInfo(in *Inputs) Setter {
	return func(ctx context.Context, node *corev1.Node) error {
		var fsCapacity uint64
		var statsErr error
		if in.Stats != nil {
			var s host.Stats
			if s, statsErr = in.Stats(); statsErr == nil {
				fsCapacity = s.Fs.Capacity
			}
		}
		if statsErr == nil {
			if c, a, ok := in.Machine.get(fsCapacity); ok {
				node.Status.Capacity, node.Status.Allocatable = withOthers(ctx, in, node, c, a)
				return nil
			}
		}
		f := in.Facts
		capacity := corev1.ResourceList{
			corev1.ResourceCPU:    *resource.NewMilliQuantity(int64(f.NumCPU)*1000, resource.DecimalSI),
			corev1.ResourceMemory: *resource.NewQuantity(f.MemoryBytes, resource.BinarySI),
			corev1.ResourcePods:   *resource.NewQuantity(in.MaxPods, resource.DecimalSI),
		}
		var hugeTotal int64
		for size, total := range f.HugePages {
			name := corev1.ResourceName(corev1.ResourceHugePagesPrefix + resource.NewQuantity(size, resource.BinarySI).String())
			capacity[name] = *resource.NewQuantity(total, resource.BinarySI)
			hugeTotal += total
		}
		if in.Stats != nil {
			if statsErr == nil {
				capacity[corev1.ResourceEphemeralStorage] = *resource.NewQuantity(int64(min(fsCapacity, 1<<62)), resource.BinarySI) //nolint:gosec // clamped
			} else if old, ok := node.Status.Capacity[corev1.ResourceEphemeralStorage]; ok {
				capacity[corev1.ResourceEphemeralStorage] = old // keep the last known size
			}
		}
		allocatable := corev1.ResourceList{}
		for name, q := range capacity {
			v := q.DeepCopy()
			if r, ok := in.Reserved[name]; ok {
				v.Sub(r)
			}
			switch name {
			case corev1.ResourceMemory:
				if t, ok := evictionapi.Find(in.EvictionHard, evictionapi.SignalMemoryAvailable); ok {
					v.Sub(*resource.NewQuantity(t.Value.Of(q.Value()), resource.BinarySI))
				}
				v.Sub(*resource.NewQuantity(hugeTotal, resource.BinarySI))
			case corev1.ResourceEphemeralStorage:
				if t, ok := evictionapi.Find(in.EvictionHard, evictionapi.SignalNodeFsAvailable); ok {
					v.Sub(*resource.NewQuantity(t.Value.Of(q.Value()), resource.BinarySI))
				}
			}
			if v.Sign() < 0 {
				v = *resource.NewQuantity(0, q.Format)
			}
			allocatable[name] = v
		}
		node.Status.Capacity, node.Status.Allocatable = withOthers(ctx, in, node, capacity, allocatable)
		if statsErr != nil {
			return statsErr
		}
		in.Machine.put(fsCapacity, capacity, allocatable)
		return nil
	}
}

// withOthers returns ours plus the resources others advertise
// (keepOthers) plus the device plugins' (in.Devices).
func withOthers(ctx context.Context, in *Inputs, node *corev1.Node, capacity, allocatable corev1.ResourceList) (corev1.ResourceList, corev1.ResourceList) {
	c, a := keepOthers(node, capacity, allocatable, in.Reserved)
	return in.Devices.overlay(ctx, c, a)
}

// keepOthers returns the node's capacity and allocatable: ours (the
// machine's resources, which are never changed here: the cache shares
// them) plus every other resource the Node already advertises, such as an
// extended resource another agent or an administrator patched into its
// capacity (the scheduler's preemption specs do that), with allocatable
// following capacity minus reserved, as the kubelet's MachineInfo setter
// keeps them. Hugepage sizes the machine no longer has are dropped.
func keepOthers(node *corev1.Node, capacity, allocatable, reserved corev1.ResourceList) (corev1.ResourceList, corev1.ResourceList) {
	var extra []corev1.ResourceName
	for name := range node.Status.Capacity {
		if _, ours := capacity[name]; !ours && !strings.HasPrefix(string(name), corev1.ResourceHugePagesPrefix) {
			extra = append(extra, name)
		}
	}
	if len(extra) == 0 {
		return capacity, allocatable
	}
	c, a := capacity.DeepCopy(), allocatable.DeepCopy()
	for _, name := range extra {
		q := node.Status.Capacity[name]
		c[name] = q.DeepCopy()
		v := q.DeepCopy()
		if r, ok := reserved[name]; ok {
			v.Sub(r)
		}
		if v.Sign() < 0 {
			v = *resource.NewQuantity(0, q.Format)
		}
		a[name] = v
	}
	return c, a
}

// MachineCache keeps the capacity and allocatable MachineInfo computed last,
// for one Inputs (and all its copies). The zero value is ready; a nil one
// keeps nothing.
type MachineCache struct {
	mu                    sync.Mutex
	fsCapacity            uint64
	capacity, allocatable corev1.ResourceList
}

func (m *MachineCache) get(fsCapacity uint64) (corev1.ResourceList, corev1.ResourceList, bool) {
	if m == nil {
		return nil, nil, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.capacity == nil || m.fsCapacity != fsCapacity {
		return nil, nil, false
	}
	return m.capacity, m.allocatable, true
}

func (m *MachineCache) put(fsCapacity uint64, capacity, allocatable corev1.ResourceList) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.fsCapacity, m.capacity, m.allocatable = fsCapacity, capacity, allocatable
}

// RuntimeFeatures sets status.features from a ready runtime's features
// (supplementalGroupsPolicy: whether it can keep SupplementalGroupsPolicy
// Strict), as the kubelet's NodeFeatures setter does with the gate GA.
// While the runtime is down or not ready, or reports no features, the
// field stays as it was.
func RuntimeFeatures(in *Inputs) Setter {
	return func(ctx context.Context, node *corev1.Node) error {
		if in.Runtime == nil {
			return nil
		}
		st := in.Runtime(ctx)
		if st.Err != nil || st.RuntimeReady != nil || st.Features == nil {
			return nil
		}
		node.Status.Features = st.Features.DeepCopy()
		return nil
	}
}

// RuntimeHandlers sets status.runtimeHandlers: the CRI runtime's handlers
// and their features (recursive read-only mounts, user namespaces), as the
// kubelet's setter does with the RecursiveReadOnlyMounts gate (GA, locked
// on). While the runtime is down or not ready the list stays as it was, as
// the kubelet keeps the handlers of its last ready runtime.
func RuntimeHandlers(in *Inputs) Setter {
	return func(ctx context.Context, node *corev1.Node) error {
		if in.Runtime == nil {
			return nil
		}
		st := in.Runtime(ctx)
		if st.Err != nil || st.RuntimeReady != nil {
			return nil
		}
		node.Status.RuntimeHandlers = st.Handlers
		return nil
	}
}

// NodeInfo sets the system info: IDs, kernel, OS image, OS and arch, the
// container runtime's version from the CRI and the Kubernetes release the
// agent implements as kubeletVersion. kubeProxyVersion is left empty, as
// the 1.36 kubelet leaves it (the field is deprecated).
func NodeInfo(in *Inputs) Setter {
	return func(ctx context.Context, node *corev1.Node) error {
		f := in.Facts
		ni := &node.Status.NodeInfo
		ni.MachineID, ni.SystemUUID, ni.BootID = f.MachineID, f.SystemUUID, f.BootID
		ni.KernelVersion, ni.OSImage = f.KernelVersion, f.OSImage
		ni.OperatingSystem, ni.Architecture = f.OS, f.Arch
		ni.KubeletVersion = in.Version
		if in.Runtime != nil {
			if v := in.Runtime(ctx).ContainerRuntimeVersion(); v != "" {
				ni.ContainerRuntimeVersion = v
			}
		}
		return nil
	}
}

// DaemonEndpoints advertises the kubelet endpoint port: the one nodeapi
// really serves when it answers, else DaemonPort (the configured port, or the
// last one nodeapi reported while it restarts).
func DaemonEndpoints(in *Inputs) Setter {
	return func(ctx context.Context, node *corev1.Node) error {
		port := in.DaemonPort
		if in.KubeletAPI != nil {
			if st := in.KubeletAPI(ctx); st.Err == nil {
				port = st.Port
			} else if old := node.Status.DaemonEndpoints.KubeletEndpoint.Port; old != 0 {
				port = old
			}
		}
		node.Status.DaemonEndpoints = corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: port}}
		return nil
	}
}

// Images sets status.images from the CRI: at most MaxImages images, at most
// MaxNamesPerImage names each. A failed listing leaves the old list.
func Images(in *Inputs) Setter {
	return func(ctx context.Context, node *corev1.Node) error {
		if in.Runtime == nil {
			return nil
		}
		st := in.Runtime(ctx)
		if st.Err != nil {
			return nil // Ready says why; keep the last list
		}
		if st.ImagesErr != nil {
			return st.ImagesErr
		}
		imgs := st.Images
		if in.MaxImages >= 0 && len(imgs) > in.MaxImages {
			imgs = imgs[:in.MaxImages]
		}
		out := make([]corev1.ContainerImage, 0, len(imgs))
		for _, img := range imgs {
			names := img.Names
			if len(names) > MaxNamesPerImage {
				names = names[:MaxNamesPerImage]
			}
			out = append(out, corev1.ContainerImage{Names: append([]string(nil), names...), SizeBytes: img.SizeBytes})
		}
		node.Status.Images = out
		return nil
	}
}

// PressureConditions sets MemoryPressure, DiskPressure and PIDPressure
// as podsyncd's eviction manager judges them (see Pressure).
func PressureConditions(in *Inputs) Setter {
	return func(ctx context.Context, node *corev1.Node) error {
		now := in.Now()
		var v PressureVerdict
		if in.Pressure != nil {
			v = in.Pressure.Verdict(ctx, now)
		}
		set := func(typ corev1.NodeConditionType, on bool, yesReason, yesMsg, noReason, noMsg string) {
			switch {
			case v.Unknown:
				SetCondition(node, corev1.NodeCondition{Type: typ, Status: corev1.ConditionUnknown, Reason: ReasonPressureUnknown, Message: v.Message}, now)
			case on:
				SetCondition(node, corev1.NodeCondition{Type: typ, Status: corev1.ConditionTrue, Reason: yesReason, Message: yesMsg}, now)
			default:
				SetCondition(node, corev1.NodeCondition{Type: typ, Status: corev1.ConditionFalse, Reason: noReason, Message: noMsg}, now)
			}
		}
		set(corev1.NodeMemoryPressure, v.Memory, "KubeletHasInsufficientMemory", "kubelet has insufficient memory available",
			"KubeletHasSufficientMemory", "kubelet has sufficient memory available")
		set(corev1.NodeDiskPressure, v.Disk, "KubeletHasDiskPressure", "kubelet has disk pressure",
			"KubeletHasNoDiskPressure", "kubelet has no disk pressure")
		set(corev1.NodePIDPressure, v.PID, "KubeletHasInsufficientPID", "kubelet has insufficient PID available",
			"KubeletHasSufficientPID", "kubelet has sufficient PID available")
		return nil
	}
}

// ReadyCondition sets Ready from the CRI's runtime and network conditions,
// the errors other components report (ReadyErrors) and the presence of the
// required capacities. Without a reachable runtime
// the node is NotReady with a message naming the socket.
func ReadyCondition(in *Inputs) Setter {
	return func(ctx context.Context, node *corev1.Node) error {
		var errs []error
		switch {
		case in.Runtime == nil:
			errs = append(errs, fmt.Errorf("container runtime is down: no runtime endpoint configured"))
		default:
			st := in.Runtime(ctx)
			if st.Err != nil {
				errs = append(errs, st.Err)
			} else {
				errs = append(errs, st.RuntimeReady, st.NetworkReady)
			}
		}
		// Then the managers' errors, where the kubelet puts its node
		// shutdown manager's.
		errs = append(errs, in.ReadyErrors.Errors()...)
		var missing []string
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourcePods, corev1.ResourceEphemeralStorage} {
			if _, ok := node.Status.Capacity[r]; !ok {
				missing = append(missing, string(r))
			}
		}
		if len(missing) > 0 {
			errs = append(errs, fmt.Errorf("missing node capacity for resources: %s", strings.Join(missing, ", ")))
		}
		cond := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: ReasonReady, Message: MessageReady}
		if err := errors.Join(errs...); err != nil {
			cond = corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: ReasonNotReady,
				Message: strings.ReplaceAll(err.Error(), "\n", ", ")}
		}
		SetCondition(node, cond, in.Now())
		// Ready goes last, as the kubelet keeps it, for old readers that
		// looked at the last condition.
		conds := node.Status.Conditions
		for i := range conds {
			if conds[i].Type == corev1.NodeReady && i != len(conds)-1 {
				r := conds[i]
				node.Status.Conditions = append(append(conds[:i:i], conds[i+1:]...), r)
				break
			}
		}
		return nil
	}
}

// SetCondition puts c on the node with a fresh heartbeat, keeping the
// transition time unless the status changed.
func SetCondition(node *corev1.Node, c corev1.NodeCondition, now time.Time) {
	t := metav1.NewTime(now)
	c.LastHeartbeatTime = t
	for i := range node.Status.Conditions {
		old := &node.Status.Conditions[i]
		if old.Type != c.Type {
			continue
		}
		if old.Status == c.Status && !old.LastTransitionTime.IsZero() {
			c.LastTransitionTime = old.LastTransitionTime
		} else {
			c.LastTransitionTime = t
		}
		*old = c
		return
	}
	c.LastTransitionTime = t
	node.Status.Conditions = append(node.Status.Conditions, c)
}

// ParseReserved parses "cpu=100m,memory=256Mi" style maps into a list,
// naming the bad resource on error.
func ParseReserved(maps ...map[string]string) (corev1.ResourceList, error) {
	out := corev1.ResourceList{}
	for _, m := range maps {
		for k, v := range m {
			switch corev1.ResourceName(k) {
			case corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage, corev1.ResourcePods:
			default:
				if !strings.HasPrefix(k, corev1.ResourceHugePagesPrefix) {
					return nil, fmt.Errorf("reserved resource %q: want cpu, memory, ephemeral-storage, pods or hugepages-<size>", k)
				}
			}
			q, err := resource.ParseQuantity(v)
			if err != nil || q.Sign() < 0 {
				return nil, fmt.Errorf("reserved resource %q: bad quantity %q", k, v)
			}
			sum := out[corev1.ResourceName(k)]
			sum.Add(q)
			out[corev1.ResourceName(k)] = sum
		}
	}
	return out, nil
}
