package pullmanager

import (
	"fmt"
	"strings"

	"github.com/distribution/reference"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// DefaultPolicy is the kubelet's default verification policy.
const DefaultPolicy = string(kubeletv1beta1.NeverVerifyPreloadedImages)

// Policy decides whether an image already on the node needs its
// credentials verified (imagePullCredentialsVerificationPolicy).
type Policy struct {
	name     kubeletv1beta1.ImagePullCredentialsVerificationPolicy
	exact    map[string]bool
	prefixes []string
}

// NewPolicy validates the policy and its allowlist as the kubelet does;
// the errors name the configuration fields. An empty name is the
// default, NeverVerifyPreloadedImages.
func NewPolicy(name string, allowlist []string) (Policy, error) {
	p := Policy{name: kubeletv1beta1.ImagePullCredentialsVerificationPolicy(name), exact: map[string]bool{}}
	if p.name == "" {
		p.name = kubeletv1beta1.NeverVerifyPreloadedImages
	}
	switch p.name {
	case kubeletv1beta1.NeverVerify, kubeletv1beta1.NeverVerifyPreloadedImages,
		kubeletv1beta1.NeverVerifyAllowlistedImages, kubeletv1beta1.AlwaysVerify:
	default:
		return Policy{}, fmt.Errorf("image_pull_credentials_verification_policy %q: want one of %s, %s, %s or %s", name,
			kubeletv1beta1.NeverVerify, kubeletv1beta1.NeverVerifyPreloadedImages, kubeletv1beta1.NeverVerifyAllowlistedImages, kubeletv1beta1.AlwaysVerify)
	}
	if len(allowlist) > 0 && p.name != kubeletv1beta1.NeverVerifyAllowlistedImages {
		return Policy{}, fmt.Errorf("preloaded_images_verification_allowlist is set but image_pull_credentials_verification_policy is %s, not %s",
			p.name, kubeletv1beta1.NeverVerifyAllowlistedImages)
	}
	for i, pat := range allowlist {
		prefix, wildcard, err := allowlistPattern(pat)
		if err != nil {
			return Policy{}, fmt.Errorf("preloaded_images_verification_allowlist[%d] %q: %w", i, pat, err)
		}
		if wildcard {
			p.prefixes = append(p.prefixes, prefix)
		} else {
			p.exact[prefix] = true
		}
	}
	return p, nil
}

// Name is the policy's name.
func (p Policy) Name() string { return string(p.name) }

// requireVerification says whether image, present on the node, needs
// the pod's credentials checked; pulledByUs is whether podsyncd ever
// pulled it (a record or an intent exists).
func (p Policy) requireVerification(image string, pulledByUs bool) bool {
	switch p.name {
	case kubeletv1beta1.NeverVerify:
		return false
	case kubeletv1beta1.AlwaysVerify:
		return true
	case kubeletv1beta1.NeverVerifyAllowlistedImages:
		return !p.allowlisted(image)
	default:
		return pulledByUs
	}
}

func (p Policy) allowlisted(image string) bool {
	name, err := trimTagDigest(image)
	if err != nil {
		name = image // best effort, as the kubelet
	}
	if p.exact[name] {
		return true
	}
	for _, pre := range p.prefixes {
		if strings.HasPrefix(name, pre) {
			return true
		}
	}
	return false
}

// allowlistPattern checks one allowlist entry: an image name without tag
// or digest, or a prefix ending in "/*" with at least a registry host.
// It returns the name or the prefix (with its trailing slash).
func allowlistPattern(pat string) (string, bool, error) {
	if pat != strings.TrimSpace(pat) {
		return "", false, fmt.Errorf("leading or trailing spaces are not allowed")
	}
	if prefix, ok := strings.CutSuffix(pat, "/*"); ok {
		if prefix == "" {
			return "", false, fmt.Errorf("at least a registry host name is required before /*")
		}
		if strings.Contains(prefix, "*") {
			return "", false, fmt.Errorf("only a trailing /* wildcard is allowed")
		}
		return prefix + "/", true, nil
	}
	if pat == "" {
		return "", false, fmt.Errorf("empty pattern")
	}
	if strings.Contains(pat, "*") {
		return "", false, fmt.Errorf("only a trailing /* wildcard is allowed")
	}
	name, err := trimTagDigest(pat)
	if err != nil {
		return "", false, fmt.Errorf("not an image name: %w", err)
	}
	if name != pat {
		return "", false, fmt.Errorf("a tag or digest is not allowed")
	}
	return pat, false, nil
}

// trimTagDigest is image without its tag and digest, the name as written
// (not normalized: "busybox:1.36" is "busybox"), the key of a record's
// credential mapping.
func trimTagDigest(image string) (string, error) {
	ref, err := reference.Parse(image)
	if err != nil {
		return "", err
	}
	if named, ok := ref.(reference.Named); ok {
		return named.Name(), nil
	}
	return "", fmt.Errorf("image %q has no name", image)
}
