package events

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/tools/reference"
)

// Component is the default event source component: the kubelet's own name,
// so `kubectl describe`, field selectors on source and tooling that look
// for kubelet events find ours.
const Component = "kubelet"

// Event reasons, the kubelet's strings (pkg/kubelet/events).
const (
	Created                = "Created"
	Started                = "Started"
	Failed                 = "Failed"
	Killing                = "Killing"
	BackOff                = "BackOff"
	Pulling                = "Pulling"
	Pulled                 = "Pulled"
	ErrImageNeverPull      = "ErrImageNeverPull"
	FailedMount            = "FailedMount"
	SandboxChanged         = "SandboxChanged"
	FailedCreatePodSandBox = "FailedCreatePodSandBox"
	Unhealthy              = "Unhealthy"
	ProbeWarning           = "ProbeWarning"
	FailedPostStartHook    = "FailedPostStartHook"
	FailedPreStopHook      = "FailedPreStopHook"
	DNSConfigForming       = "DNSConfigForming"
	MissingClusterDNS      = "MissingClusterDNS"
)

// Recorder is what podsyncd's packages record events with.
type Recorder = record.EventRecorder

// The kubelet's event rate limits (eventRecordQPS 50, eventBurst 100).
const (
	qps   = 50
	burst = 100
)

// New returns a recorder that posts events to the API server with client,
// as component on host nodeName, and also logs them; stop flushes what it
// can and ends the broadcaster. A nil client (standalone) only logs.
func New(client kubernetes.Interface, nodeName, component string, log *slog.Logger) (Recorder, func()) {
	if log == nil {
		log = slog.Default()
	}
	if client == nil {
		return NewLog(log), func() {}
	}
	b := record.NewBroadcaster(record.WithCorrelatorOptions(record.CorrelatorOptions{QPS: qps, BurstSize: burst}))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	logged := b.StartEventWatcher(newLogSink(log, record.CorrelatorOptions{}).log)
	rec := b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component, Host: nodeName})
	return rec, func() { logged.Stop(); b.Shutdown() }
}

// NewLog returns a recorder that only writes events to the log (standalone
// mode, and tests), correlated as New's are.
func NewLog(log *slog.Logger) Recorder { return newLogRecorder(log, record.CorrelatorOptions{}) }

func newLogRecorder(log *slog.Logger, opts record.CorrelatorOptions) logRecorder {
	return logRecorder{sink: newLogSink(log, opts), clock: opts.Clock}
}

type logRecorder struct {
	sink  *logSink
	clock interface{ Now() time.Time }
}

func (l logRecorder) Event(obj runtime.Object, eventtype, reason, message string) {
	ref, err := reference.GetReference(scheme.Scheme, obj)
	if err != nil {
		ref = &corev1.ObjectReference{}
	}
	now := time.Now()
	if l.clock != nil {
		now = l.clock.Now()
	}
	l.sink.log(&corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: ref.Namespace},
		InvolvedObject: *ref, Type: eventtype, Reason: reason, Message: message, Count: 1,
		Source:         corev1.EventSource{Component: Component},
		FirstTimestamp: metav1.NewTime(now), LastTimestamp: metav1.NewTime(now),
	})
}

// logSink writes events to the log through client-go's event correlator,
// as the kubelet's recorder sends them to the API server: a repeat of an
// event (same object, reason and message) is counted, and logged only when
// its count reaches a power of two (with the count); similar events beyond
// ten in ten minutes are combined; an object's events beyond the spam
// filter's burst (25, then one per five minutes) are dropped. A sync loop
// retrying every second thus logs its MissingClusterDNS or BackOff warning
// a few times, not once a second.
type logSink struct {
	out *slog.Logger
	mu  sync.Mutex
	c   *record.EventCorrelator
}

func newLogSink(log *slog.Logger, opts record.CorrelatorOptions) *logSink {
	return &logSink{out: log, c: record.NewEventCorrelatorWithOptions(opts)}
}

func (s *logSink) log(e *corev1.Event) {
	s.mu.Lock()
	res, err := s.c.EventCorrelate(e.DeepCopy())
	if err != nil || res.Skip {
		s.mu.Unlock()
		return
	}
	s.c.UpdateState(res.Event)
	s.mu.Unlock()
	if n := res.Event.Count; n > 1 && n&(n-1) != 0 {
		return
	}
	logEvent(s.out, &res.Event.InvolvedObject, res.Event.Type, res.Event.Reason, res.Event.Message, res.Event.Count)
}

func (l logRecorder) Eventf(obj runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	l.Event(obj, eventtype, reason, fmt.Sprintf(messageFmt, args...))
}

func (l logRecorder) AnnotatedEventf(obj runtime.Object, _ map[string]string, eventtype, reason, messageFmt string, args ...any) {
	l.Eventf(obj, eventtype, reason, messageFmt, args...)
}

func logEvent(log *slog.Logger, ref *corev1.ObjectReference, eventtype, reason, message string, count int32) {
	level := slog.LevelInfo
	if eventtype == corev1.EventTypeWarning {
		level = slog.LevelWarn
	}
	attrs := []any{"type", eventtype, "reason", reason, "object", ref.Kind + "/" + ref.Namespace + "/" + ref.Name}
	if ref.FieldPath != "" {
		attrs = append(attrs, "field", ref.FieldPath)
	}
	if count > 1 {
		attrs = append(attrs, "count", count)
	}
	log.Log(context.Background(), level, "event: "+message, attrs...)
}

// PodRef is the reference of a pod's own events.
func PodRef(pod *corev1.Pod) *corev1.ObjectReference {
	return &corev1.ObjectReference{
		Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name,
		UID: pod.UID, ResourceVersion: pod.ResourceVersion,
	}
}

// ContainerRef is the reference of a container's events: the pod with the
// container's field path (spec.containers{name} or spec.initContainers{name}),
// as the kubelet's GenerateContainerRef makes it.
func ContainerRef(pod *corev1.Pod, c *corev1.Container) *corev1.ObjectReference {
	ref := PodRef(pod)
	ref.FieldPath = "implicitly required container " + c.Name
	for _, list := range []struct {
		field string
		cs    []corev1.Container
	}{{"spec.containers", pod.Spec.Containers}, {"spec.initContainers", pod.Spec.InitContainers}} {
		for i := range list.cs {
			if list.cs[i].Name == c.Name {
				ref.FieldPath = fmt.Sprintf("%s{%s}", list.field, c.Name)
				return ref
			}
		}
	}
	for i := range pod.Spec.EphemeralContainers {
		if pod.Spec.EphemeralContainers[i].Name == c.Name {
			ref.FieldPath = fmt.Sprintf("spec.ephemeralContainers{%s}", c.Name)
			return ref
		}
	}
	return ref
}
