package docker

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/moby/moby/client"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Labels on every Docker object the shim creates. CRI labels and
// annotations travel as JSON in one label each, so they can never collide
// with ours or with each other.
const (
	LabelInstance    = "io.microlet.instance"
	LabelType        = "io.microlet.type"
	LabelSandboxID   = "io.microlet.sandbox-id"
	LabelName        = "io.microlet.name"
	LabelNamespace   = "io.microlet.namespace"
	LabelUID         = "io.microlet.uid"
	LabelAttempt     = "io.microlet.attempt"
	LabelCRILabels   = "io.microlet.cri-labels"
	LabelAnnotations = "io.microlet.cri-annotations"
	LabelLogPath     = "io.microlet.log-path"
	LabelImage       = "io.microlet.image"
	LabelPodName     = "io.microlet.pod-name"
	LabelPodNS       = "io.microlet.pod-namespace"
	LabelPodUID      = "io.microlet.pod-uid"
	// LabelImageMounts records a container's image mounts (container path
	// → image and sub path, JSON) so its status reports them as the
	// runtime was asked: the kubelet's image GC keeps those images.
	LabelImageMounts = "io.microlet.image-mounts"
	// LabelRuntimeHandler is a sandbox's CRI runtime handler, on its pause
	// container when not the default (handlers.go), so a list reports it
	// without reading checkpoints.
	LabelRuntimeHandler = "io.microlet.runtime-handler"

	typeSandbox   = "sandbox"
	typeContainer = "container"
)

func encodeMap(m map[string]string) string {
	if len(m) == 0 {
		return "{}"
	}
	b, _ := json.Marshal(m)
	return string(b)
}

func decodeMap(s string) map[string]string {
	m := map[string]string{}
	if s != "" {
		_ = json.Unmarshal([]byte(s), &m)
	}
	return m
}

// imageMount is one image mount as LabelImageMounts keeps it.
type imageMount struct {
	Image   string `json:"image"`
	SubPath string `json:"subPath,omitempty"`
}

func encodeImageMounts(ms []*runtimeapi.Mount) (string, bool) {
	out := map[string]imageMount{}
	for _, m := range ms {
		if ref := m.GetImage().GetImage(); ref != "" {
			out[m.ContainerPath] = imageMount{Image: ref, SubPath: m.GetImageSubPath()}
		}
	}
	if len(out) == 0 {
		return "", false
	}
	b, _ := json.Marshal(out)
	return string(b), true
}

func decodeImageMounts(s string) map[string]imageMount {
	out := map[string]imageMount{}
	if s != "" {
		_ = json.Unmarshal([]byte(s), &out)
	}
	return out
}

// nameSafe keeps Docker container names valid ([a-zA-Z0-9][a-zA-Z0-9_.-]*).
func nameSafe(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-':
			return r
		}
		return '-'
	}, s)
}

// sandboxName is the pause container's name; the same metadata gives the
// same name, which is what makes RunPodSandbox idempotent.
func (b *Backend) sandboxName(m *runtimeapi.PodSandboxMetadata) string {
	return fmt.Sprintf("k8s_POD_%s_%s_%s_%d_%s", nameSafe(m.Name), nameSafe(m.Namespace), nameSafe(m.Uid), m.Attempt, nameSafe(b.opts.Instance))
}

func (b *Backend) containerName(sb *sandboxInfo, m *runtimeapi.ContainerMetadata) string {
	return fmt.Sprintf("k8s_%s_%s_%s_%s_%d_%s", nameSafe(m.Name), nameSafe(sb.Name), nameSafe(sb.Namespace), nameSafe(sb.UID), m.Attempt, nameSafe(b.opts.Instance))
}

func (b *Backend) instanceFilter(kind string) client.Filters {
	f := client.Filters{}
	f.Add("label", LabelInstance+"="+b.opts.Instance)
	if kind != "" {
		f.Add("label", LabelType+"="+kind)
	}
	return f
}

func parseAttempt(s string) uint32 {
	n, _ := strconv.ParseUint(s, 10, 32)
	return uint32(n)
}

// matchLabels reports whether every selector entry is in labels.
func matchLabels(sel, labels map[string]string) bool {
	for k, v := range sel {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}
