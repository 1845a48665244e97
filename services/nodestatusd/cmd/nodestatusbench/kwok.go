package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

const (
	// kwokVersion is the yardstick's version (hack/build-kwok.sh builds it).
	kwokVersion = "v0.8.0"
	// kwokModule is kwok's Go module, whose stage files the config reuses.
	kwokModule = "sigs.k8s.io/kwok"
	// kwokNodeAnnotation is kwok's conventional mark on the Nodes it fakes.
	kwokNodeAnnotation = "kwok.x-k8s.io/node"
	// kwokLabel selects the Nodes of one run (--manage-nodes-with-label-selector).
	kwokLabel = "nodestatusbench.microlet.io/kwok"
	// reportFrequencyMillis is the kubelet's --node-status-report-frequency;
	// kwok's heartbeat stage is set to it (plus kwokctl's 10 % jitter) so
	// both agents report status as often as a kubelet does.
	reportFrequencyMillis = 300000
)

// writeKwokConfig writes kwok's stages: kwok's own node stages from its module,
// node-initialize (Ready at once) and node-heartbeat-with-lease with the
// delay set to the kubelet's report frequency instead of 10 minutes.
func writeKwokConfig(ctx context.Context, dir string) (string, error) {
	modDir, err := moduleDir(ctx, kwokModule+"@"+kwokVersion)
	if err != nil {
		return "", err
	}
	initStage, err := os.ReadFile(filepath.Join(modDir, "kustomize/stage/node/fast/node-initialize.yaml"))
	if err != nil {
		return "", err
	}
	heartbeat, err := os.ReadFile(filepath.Join(modDir, "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml"))
	if err != nil {
		return "", err
	}
	hb := string(heartbeat)
	for old, repl := range map[string]string{
		"durationMilliseconds: 600000":       fmt.Sprintf("durationMilliseconds: %d", reportFrequencyMillis),
		"jitterDurationMilliseconds: 610000": fmt.Sprintf("jitterDurationMilliseconds: %d", reportFrequencyMillis*11/10),
	} {
		if !strings.Contains(hb, old) {
			return "", fmt.Errorf("kwok %s heartbeat stage: no %q to replace; check the stage file", kwokVersion, old)
		}
		hb = strings.Replace(hb, old, repl, 1)
	}
	// No KwokConfiguration document: one without every option skips
	// kwok's defaults (parallelism 0 is refused); the lease duration is a flag.
	cfg := string(initStage) + "\n---\n" + hb
	path := filepath.Join(dir, "kwok.yaml")
	return path, os.WriteFile(path, []byte(cfg), 0o600)
}

// moduleDir downloads mod@version into the module cache (a no-op when it
// is there, as after hack/build-kwok.sh) and returns its directory.
func moduleDir(ctx context.Context, modVersion string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", modVersion)
	// Outside any module, so this repository's go.mod and go.sum stay untouched.
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go mod download %s: %w", modVersion, err)
	}
	var m struct{ Dir, Error string }
	if err := json.Unmarshal(out, &m); err != nil {
		return "", fmt.Errorf("go mod download %s: %w", modVersion, err)
	}
	if m.Error != "" || m.Dir == "" {
		return "", fmt.Errorf("go mod download %s: %s", modVersion, m.Error)
	}
	return m.Dir, nil
}

// kwokNode is a Node as a kubelet would register it, marked for kwok.
func kwokNode(name, prefix string) *corev1.Node {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("2"),
		corev1.ResourceMemory:           resource.MustParse("8Gi"),
		corev1.ResourcePods:             resource.MustParse("110"),
		corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Labels: map[string]string{
				corev1.LabelHostname: name, corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64",
				"beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64",
				kwokLabel: prefix,
			},
			Annotations: map[string]string{kwokNodeAnnotation: "fake"},
		},
		Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity},
	}
}

// createKwokNodes registers n Nodes for kwok, 32 at a time.
func createKwokNodes(ctx context.Context, client kubernetes.Interface, prefix string, n int) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	sem := make(chan struct{}, 32)
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			_, err := client.CoreV1().Nodes().Create(ctx, kwokNode(nodeName(prefix, i), prefix), metav1.CreateOptions{})
			if err != nil {
				mu.Lock()
				if first == nil {
					first = fmt.Errorf("create node %s: %w", nodeName(prefix, i), err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return first
}
