package kubeletconfig

import (
	"fmt"
	"os"
	"path/filepath"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"
)

// Kind is the kind of the kubelet's configuration file.
const Kind = "KubeletConfiguration"

var codecs = func() serializer.CodecFactory {
	s := runtime.NewScheme()
	if err := kubeletv1beta1.AddToScheme(s); err != nil {
		panic(err)
	}
	return serializer.NewCodecFactory(s, serializer.EnableStrict)
}()

// Is reports whether data is a KubeletConfiguration: its apiVersion is
// kubelet.config.k8s.io/v1beta1 and its kind KubeletConfiguration. Anything
// else (microlet's own file) is not.
func Is(data []byte) bool {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(data, &tm); err != nil {
		return false
	}
	return tm.Kind == Kind && tm.GroupVersionKind().Group == kubeletv1beta1.GroupName
}

// Decode decodes a KubeletConfiguration strictly: an unknown or duplicated
// field, a value of the wrong type or another apiVersion is an error in the
// apimachinery decoder's words. (The kubelet v1.36.3 retries a file that fails
// strict decoding leniently and only logs the strict error; microlet refuses
// it, so that no field is silently ignored.) The result is not defaulted.
func Decode(data []byte) (*kubeletv1beta1.KubeletConfiguration, error) {
	kc := &kubeletv1beta1.KubeletConfiguration{}
	obj, gvk, err := codecs.UniversalDeserializer().Decode(data, nil, kc)
	if err != nil {
		return nil, err
	}
	out, ok := obj.(*kubeletv1beta1.KubeletConfiguration)
	if !ok {
		return nil, fmt.Errorf("%v is not a %s", gvk, Kind)
	}
	return out, nil
}

// Load reads, decodes, defaults and validates the KubeletConfiguration in
// file name, with the kubelet's error wording ("failed to load Kubelet config
// file ..."). Relative paths in the file (staticPodPath, tlsCertFile, ...)
// are taken from the file's directory, as the kubelet does.
func Load(name string) (*kubeletv1beta1.KubeletConfiguration, error) {
	kc, err := LoadUndefaulted(name)
	if err != nil {
		return nil, err
	}
	SetDefaults(kc)
	return kc, nil
}

// LoadUndefaulted is Load without SetDefaults, so the caller can tell what
// the file set.
func LoadUndefaulted(name string) (*kubeletv1beta1.KubeletConfiguration, error) {
	const errFmt = "failed to load Kubelet config file %s, error %v"
	abs, err := filepath.Abs(name)
	if err != nil {
		return nil, fmt.Errorf(errFmt, name, err)
	}
	data, err := os.ReadFile(abs)
	if err != nil {
		return nil, fmt.Errorf(errFmt, name, fmt.Errorf("failed to read kubelet config file %q, error: %w", abs, err))
	}
	if len(data) == 0 {
		return nil, fmt.Errorf(errFmt, name, fmt.Errorf("kubelet config file %q was empty", abs))
	}
	kc, err := Decode(data)
	if err != nil {
		return nil, fmt.Errorf(errFmt, name, fmt.Errorf("failed to decode: %w", err))
	}
	resolveRelativePaths(kc, filepath.Dir(abs))
	return kc, nil
}

// resolveRelativePaths makes the file's relative paths absolute from dir, the
// fields the kubelet's KubeletConfigurationPathRefs names.
func resolveRelativePaths(kc *kubeletv1beta1.KubeletConfiguration, dir string) {
	paths := []*string{
		&kc.StaticPodPath,
		&kc.Authentication.X509.ClientCAFile,
		&kc.TLSCertFile,
		&kc.TLSPrivateKeyFile,
		&kc.VolumePluginDir,
		&kc.PodLogsDir,
	}
	if kc.ResolverConfig != nil {
		paths = append(paths, kc.ResolverConfig)
	}
	for _, p := range paths {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
}
