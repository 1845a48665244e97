// Command upstreamparity runs upstream's own pkg/kubelet/config file source
// and PodConfig over the parity manifests and writes what the kubelet makes
// of them: the golden file podconfig's manifest tests compare against.
//
//	cd services/podconfig/bench && go run ./cmd/upstreamparity \
//	    ../internal/manifest/testdata/parity > ../internal/manifest/testdata/parity/upstream.json
//
// The manifests are copied to a fixed directory first, because the file
// path is part of a static pod's UID.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/capabilities"
	"k8s.io/kubernetes/pkg/kubelet/config"
)

// Where the manifests are copied and the node they are read for; the
// manifest tests use the same values.
const (
	Dir      = "/tmp/podconfig-parity"
	NodeName = "parity-node"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: upstreamparity <manifest dir>")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(src string) error {
	_ = os.RemoveAll(Dir)
	if err := os.MkdirAll(Dir, 0o755); err != nil {
		return err
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if filepath.Ext(e.Name()) != ".yaml" && filepath.Ext(e.Name()) != ".json" || e.Name() == "upstream.json" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(Dir, e.Name()), b, 0o644); err != nil {
			return err
		}
	}
	// The kubelet allows privileged containers unless told otherwise.
	capabilities.Initialize(capabilities.Capabilities{AllowPrivileged: true})
	pc := config.NewPodConfig(record.NewFakeRecorder(100), nil)
	config.NewSourceFile(klog.Background(), Dir, types.NodeName(NodeName), time.Hour, pc.Channel(context.Background(), "file"))
	u := <-pc.Updates()
	out := map[string]any{}
	for _, p := range u.Pods {
		// Set by the merge at the time it ran; not part of the parity.
		delete(p.Annotations, "kubernetes.io/config.seen")
		delete(p.Annotations, "kubernetes.io/config.source")
		out[p.Name] = p
	}
	names := make([]string, 0, len(out))
	for n := range out {
		names = append(names, n)
	}
	sort.Strings(names)
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(map[string]any{"dir": Dir, "node": NodeName, "accepted": names, "pods": out})
}
