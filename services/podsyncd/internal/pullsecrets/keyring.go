package pullsecrets

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strings"

	"github.com/distribution/reference"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Docker Hub's names: credentials saved for "https://index.docker.io/v1/"
// are Docker Hub's, whose images are named "docker.io/...".
const (
	dockerHubHost = "index.docker.io"
)

// Entry is one registry's credentials in a docker config.
type Entry struct {
	Username      string `json:"username,omitempty"`
	Password      string `json:"password,omitempty"`
	Auth          string `json:"auth,omitempty"`
	Email         string `json:"email,omitempty"`
	IdentityToken string `json:"identitytoken,omitempty"`
	RegistryToken string `json:"registrytoken,omitempty"`
}

// SecretRef names the pull secret a credential came from.
type SecretRef struct {
	UID, Namespace, Name string
}

// Cred is one credential of a keyring and where it came from, as the
// kubelet tracks it for pull-credential verification.
type Cred struct {
	Auth *runtimeapi.AuthConfig
	// Hash is the kubelet's credential hash: SHA-256 of the JSON of the
	// user name, password and e-mail, so a record written by either
	// agent matches the same secret contents.
	Hash string
	// Secret is the pull secret the credential came from; nil for the
	// node's own credentials (docker config files, credential provider
	// plugins), which every pod on the node may use.
	Secret *SecretRef
}

// Keyring holds credentials by registry key ("host[:port][/path]"),
// keys sorted from the most specific.
type Keyring struct {
	keys  []string
	creds map[string][]Cred
}

// Add adds a docker config's entries (registry location → credentials)
// as node-wide credentials. A location may carry a scheme and Docker's
// /v1/ or /v2/ path, which do not count; an entry with "auth" takes the
// user and password from it.
func (k *Keyring) Add(cfg map[string]Entry) error { return k.add(nil, cfg) }

func (k *Keyring) add(src *SecretRef, cfg map[string]Entry) error {
	if k.creds == nil {
		k.creds = map[string][]Cred{}
	}
	var errs []string
	for loc, e := range cfg {
		v := loc
		if !strings.HasPrefix(v, "https://") && !strings.HasPrefix(v, "http://") {
			v = "https://" + v
		}
		u, err := url.Parse(v)
		if err != nil || u.Host == "" {
			errs = append(errs, fmt.Sprintf("registry %q is not a host[:port][/path]", loc))
			continue
		}
		p := u.Path
		if strings.HasPrefix(p, "/v1/") || strings.HasPrefix(p, "/v2/") {
			p = p[3:]
		}
		key := u.Host
		if p != "" && p != "/" {
			key += p
		}
		user, pass := e.Username, e.Password
		if e.Auth != "" {
			user, pass, err = decodeAuth(e.Auth)
			if err != nil {
				errs = append(errs, fmt.Sprintf("registry %q: %v", loc, err))
				continue
			}
		}
		k.creds[key] = append(k.creds[key], Cred{
			Auth: &runtimeapi.AuthConfig{
				Username: user, Password: pass, ServerAddress: u.Host,
				IdentityToken: e.IdentityToken, RegistryToken: e.RegistryToken,
			},
			Hash:   credentialHash(user, pass, e.Email),
			Secret: src,
		})
		if !slices.Contains(k.keys, key) {
			k.keys = append(k.keys, key)
		}
	}
	// Reverse order puts "quay.io/coreos" before "quay.io".
	slices.Sort(k.keys)
	slices.Reverse(k.keys)
	if len(errs) > 0 {
		slices.Sort(errs)
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// credentialHash is the kubelet's hash of a credential
// (pkg/credentialprovider): SHA-256, hex, of the JSON object of the
// non-empty username, password and email.
func credentialHash(user, pass, email string) string {
	b, err := json.Marshal(struct {
		Username string `json:"username,omitempty"`
		Password string `json:"password,omitempty"`
		Email    string `json:"email,omitempty"`
	}{user, pass, email})
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func decodeAuth(s string) (string, string, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return "", "", fmt.Errorf("auth is not base64: %w", err)
	}
	user, pass, ok := strings.Cut(string(b), ":")
	if !ok {
		return "", "", fmt.Errorf("auth is not user:password")
	}
	return user, strings.Trim(pass, "\x00"), nil
}

// AddSecret adds a kubernetes.io/dockerconfigjson or kubernetes.io/dockercfg
// secret; other types hold no registry credentials and are an error.
func (k *Keyring) AddSecret(s *corev1.Secret) error {
	name := s.Namespace + "/" + s.Name
	src := &SecretRef{UID: string(s.UID), Namespace: s.Namespace, Name: s.Name}
	if b, ok := s.Data[corev1.DockerConfigJsonKey]; ok && len(b) > 0 {
		cfg, err := ParseDockerConfigJSON(b)
		if err != nil {
			return fmt.Errorf("secret %s: %s: %w", name, corev1.DockerConfigJsonKey, err)
		}
		if err := k.add(src, cfg); err != nil {
			return fmt.Errorf("secret %s: %w", name, err)
		}
		return nil
	}
	if b, ok := s.Data[corev1.DockerConfigKey]; ok && len(b) > 0 {
		cfg, err := ParseDockercfg(b)
		if err != nil {
			return fmt.Errorf("secret %s: %s: %w", name, corev1.DockerConfigKey, err)
		}
		if err := k.add(src, cfg); err != nil {
			return fmt.Errorf("secret %s: %w", name, err)
		}
		return nil
	}
	return fmt.Errorf("secret %s has neither %s nor %s", name, corev1.DockerConfigJsonKey, corev1.DockerConfigKey)
}

// Repository is the image's repository as the keyring matches it: the
// normalized name without tag or digest ("busybox" is
// "docker.io/library/busybox").
func Repository(image string) (string, error) {
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return "", fmt.Errorf("image %q: %w", image, err)
	}
	return named.Name(), nil
}

// Lookup returns the credentials whose key matches repo (see Repository),
// the most specific keys first; Docker Hub images fall back to the
// credentials saved for index.docker.io.
func (k *Keyring) Lookup(repo string) []Cred {
	var out []Cred
	for _, key := range k.keys {
		if Match(key, repo) {
			out = append(out, k.creds[key]...)
		}
	}
	if len(out) == 0 && dockerHub(repo) {
		out = append(out, k.creds[dockerHubHost]...)
	}
	return out
}

// dockerHub says whether repo is pulled from Docker Hub.
func dockerHub(repo string) bool {
	first, _, found := strings.Cut(repo, "/")
	if first == "" {
		return false
	}
	if !found || first == "docker.io" || first == dockerHubHost {
		return true
	}
	return !strings.ContainsAny(first, ".:")
}

// Match says whether a keyring key ("host[:port][/path]", the host's
// dot-separated parts globs as path.Match has them) matches a repository:
// the same number of host parts each matching its glob, the same port
// (none matches only none), and the key's path a prefix of the
// repository's.
func Match(key, repo string) bool {
	kh, kp := split(key)
	rh, rp := split(repo)
	kHost, kPort := hostPort(kh)
	rHost, rPort := hostPort(rh)
	if kPort != rPort || !strings.HasPrefix(rp, kp) {
		return false
	}
	kParts, rParts := strings.Split(kHost, "."), strings.Split(rHost, ".")
	if len(kParts) != len(rParts) {
		return false
	}
	for i := range kParts {
		if ok, err := filepath.Match(kParts[i], rParts[i]); err != nil || !ok {
			return false
		}
	}
	return true
}

func split(s string) (host, path string) {
	h, p, found := strings.Cut(s, "/")
	if found {
		p = "/" + p
	}
	return h, p
}

func hostPort(h string) (string, string) {
	host, port, err := net.SplitHostPort(h)
	if err != nil {
		return h, ""
	}
	return host, port
}
