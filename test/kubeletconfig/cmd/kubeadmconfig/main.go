// Command kubeadmconfig prints the KubeletConfiguration that kubeadm
// (k8s.io/kubernetes v1.36.3) writes for a node with its defaults
// (DefaultedStaticInitConfiguration), the file `microlet run` is tested with
// (internal/kubeletconfig/testdata/kubeadm.yaml, make generate).
package main

import (
	"fmt"
	"os"

	"k8s.io/kubernetes/cmd/kubeadm/app/componentconfigs"
	configutil "k8s.io/kubernetes/cmd/kubeadm/app/util/config"
)

func main() {
	cfg, err := configutil.DefaultedStaticInitConfiguration()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	kc, ok := cfg.ComponentConfigs[componentconfigs.KubeletGroup]
	if !ok {
		fmt.Fprintln(os.Stderr, "kubeadm produced no KubeletConfiguration")
		os.Exit(1)
	}
	data, err := kc.Marshal()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Stdout.Write(data)
}
