package podruntime

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/microlet/microlet/services/podsyncd/internal/events"
	"github.com/microlet/microlet/services/podsyncd/internal/pullsecrets"
)

// ensureImage pulls the image as imagePullPolicy says.
func (m *Manager) ensureImage(ctx context.Context, pod *corev1.Pod, c *corev1.Container) (string, error) {
	return m.ensure(ctx, pod, c, events.ContainerRef(pod, c), c.Image, c.ImagePullPolicy)
}

// ensure pulls image as policy says ("" is IfNotPresent) with the pod's
// credentials, recording the pull's events on ref and a failure's reason
// (ErrImagePull, ImagePullBackOff, ErrImageNeverPull) on container c. It
// is the image's reference for the runtime.
//
// With pull records (PullRecords), a present image is used only when the
// verification policy lets the pod have it; otherwise the pod must pull it
// with its own credentials (IfNotPresent), or, with Never, is told the
// image is not present, as the kubelet does not to reveal it.
func (m *Manager) ensure(ctx context.Context, pod *corev1.Pod, c *corev1.Container, ref runtime.Object, image string, policy corev1.PullPolicy) (string, error) {
	spec := &runtimeapi.ImageSpec{Image: image}
	if policy == "" {
		policy = corev1.PullIfNotPresent
	}
	present := ""
	if policy != corev1.PullAlways {
		st, err := m.img.ImageStatus(ctx, spec, false)
		if err == nil && st.Image != nil {
			present = st.Image.Id
		}
	}
	creds := sync.OnceValue(func() []pullsecrets.Cred { return m.pullAuths(ctx, pod, image) })
	if present != "" {
		if m.opts.PullRecords == nil {
			m.opts.Recorder.Eventf(ref, corev1.EventTypeNormal, events.Pulled, "Container image %q already present on machine", image)
			return present, nil
		}
		mustPull, err := m.opts.PullRecords.MustAttemptImagePull(ctx, image, present,
			func() ([]kubeletv1beta1.ImagePullSecret, error) { return podSecrets(creds()), nil })
		if err != nil {
			m.setReason(pod.UID, c.Name, &Reason{ReasonErrImagePull, err.Error()})
			return "", err
		}
		if !mustPull {
			m.opts.Recorder.Eventf(ref, corev1.EventTypeNormal, events.Pulled, "Container image %q already present on machine and can be accessed by the pod", image)
			return present, nil
		}
	}
	if policy == corev1.PullNever {
		msg := fmt.Sprintf("Container image %q is not present with pull policy of Never", image)
		m.opts.Recorder.Event(ref, corev1.EventTypeWarning, events.ErrImageNeverPull, msg)
		m.setReason(pod.UID, c.Name, &Reason{ReasonErrImageNeverPull, msg})
		return "", errors.New(msg)
	}
	key := "pull_" + string(pod.UID) + "_" + image
	now := m.opts.Clock.Now()
	if m.pulls.IsInBackOffSinceUpdate(key, now) {
		msg := fmt.Sprintf("Back-off pulling image %q", image)
		m.opts.Recorder.Event(ref, corev1.EventTypeNormal, events.BackOff, msg)
		m.setReason(pod.UID, c.Name, &Reason{ReasonImagePullBackOff, msg})
		return "", errors.New(msg)
	}
	if m.opts.PullRecords != nil {
		if err := m.opts.PullRecords.RecordPullIntent(image); err != nil {
			msg := fmt.Sprintf("Failed to record image pull intent for container image %q: %v", image, err)
			m.setReason(pod.UID, c.Name, &Reason{ReasonErrImagePull, msg})
			return "", errors.New(msg)
		}
	}
	m.opts.Recorder.Eventf(ref, corev1.EventTypeNormal, events.Pulling, "Pulling image %q", image)
	m.opts.Startup.PullStarted(pod.UID)
	imageRef, used, err := m.pull(ctx, spec, creds())
	if err == nil {
		m.opts.Startup.PullFinished(pod.UID)
	}
	if err != nil {
		if m.opts.PullRecords != nil {
			m.opts.PullRecords.RecordImagePullFailed(image)
		}
		m.pulls.Next(key, now)
		msg := fmt.Sprintf("Failed to pull image %q: %v", image, err)
		m.opts.Recorder.Event(ref, corev1.EventTypeWarning, events.Failed, msg)
		m.setReason(pod.UID, c.Name, &Reason{ReasonErrImagePull, msg})
		return "", errors.New(msg)
	}
	if m.opts.PullRecords != nil {
		m.opts.PullRecords.RecordImagePulled(image, imageRef, pulledWith(used))
	}
	m.pulls.Reset(key)
	m.opts.Recorder.Eventf(ref, corev1.EventTypeNormal, events.Pulled, "Successfully pulled image %q in %v (%v including waiting). Image size: %v bytes.",
		image, m.opts.Clock.Since(now).Truncate(time.Millisecond), m.opts.Clock.Since(now).Truncate(time.Millisecond), m.imageSize(ctx, imageRef))
	return imageRef, nil
}

// imageSize is a pulled image's size for the Pulled event (0 if unknown).
func (m *Manager) imageSize(ctx context.Context, ref string) uint64 {
	st, err := m.img.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: ref}, false)
	if err != nil || st.Image == nil {
		return 0
	}
	return st.Image.Size
}
