package pullmanager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	criapi "k8s.io/cri-api/pkg/apis"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"

	"github.com/microlet/microlet/internal/statefile"
)

// matchWriteLimit stops recording a matching pod's secret in a record
// that already lists this many secrets (the kubelet's bound against
// namespace churn).
const matchWriteLimit = 100

// PodSecrets returns the pod's pull secrets that hold credentials for
// the image, with the credential hash of each (called only when needed).
type PodSecrets func() ([]kubeletv1beta1.ImagePullSecret, error)

// Manager keeps the pull intents and records.
type Manager struct {
	store  *store
	policy Policy
	clock  clock.Clock
	log    *slog.Logger

	// mu serialises every read-decide-write of the files: pulls are
	// rare next to the file I/O, one lock is enough.
	mu sync.Mutex
	// inflight counts the pulls of each image under way.
	inflight map[string]int
}

// New opens the records under root (the data dir: root/image_manager)
// and turns the intents of images the runtime has into records.
func New(ctx context.Context, root string, policy Policy, images criapi.ImageManagerService, log *slog.Logger) (*Manager, error) {
	if log == nil {
		log = slog.Default()
	}
	s, err := openStore(root, log)
	if err != nil {
		return nil, err
	}
	m := &Manager{store: s, policy: policy, clock: clock.RealClock{}, log: log, inflight: map[string]int{}}
	m.recoverIntents(ctx, images)
	return m, nil
}

// Policy is the verification policy in force.
func (m *Manager) Policy() Policy { return m.policy }

// recoverIntents finishes pulls that were under way when podsyncd
// stopped: an intent whose image the runtime now has (by tag or digest)
// becomes a record with no credentials, so the next pod must verify.
func (m *Manager) recoverIntents(ctx context.Context, images criapi.ImageManagerService) {
	intents, err := m.store.intents()
	corrupt := corruptFiles(err)
	if err != nil && len(corrupt) == 0 {
		m.log.Warn("image pull intents partly unreadable", "err", err)
	}
	if (len(intents) == 0 && len(corrupt) == 0) || images == nil {
		return
	}
	list, err := images.ListImages(ctx, nil)
	if err != nil {
		m.log.Warn("image pull intents kept: listing images failed", "err", err)
		return
	}
	for _, im := range list {
		for _, name := range slices.Concat(im.RepoTags, im.RepoDigests) {
			// A corrupt intent is known by its file name, the hash of
			// the image it was for: that image, present now, gets the
			// record an intact intent would have given it.
			at := slices.Index(corrupt, filepath.Join(m.store.pulling, fileName(name)))
			if !slices.Contains(intents, name) && at < 0 {
				continue
			}
			if err := m.mergeRecord(name, im.Id, nil); err != nil {
				m.log.Warn("image pull intent not turned into a record", "image", name, "err", err)
				continue
			}
			if at >= 0 {
				if _, err := statefile.Quarantine(m.log, corrupt[at], fmt.Errorf("image pull intent of %s does not decode", name)); err != nil {
					m.log.Warn("corrupt image pull intent not moved aside", "file", corrupt[at], "err", err)
				}
				corrupt = slices.Delete(corrupt, at, at+1)
				continue
			}
			if err := m.store.deleteIntent(name); err != nil {
				m.log.Warn("image pull intent not removed", "image", name, "err", err)
			}
		}
	}
	// The others were for images the runtime does not have: the pull
	// never finished, and there is nothing to record.
	for _, p := range corrupt {
		if _, err := statefile.Quarantine(m.log, p, errors.New("image pull intent does not decode; its image is not on the node")); err != nil {
			m.log.Warn("corrupt image pull intent not moved aside", "file", p, "err", err)
		}
	}
}

// RecordPullIntent writes the intent to pull image (the container's image
// field) before a pull; every call is matched by RecordImagePulled or
// RecordImagePullFailed.
func (m *Manager) RecordPullIntent(image string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.store.writeIntent(image); err != nil {
		return fmt.Errorf("failed to record image pull intent: %w", err)
	}
	m.inflight[image]++
	return nil
}

// RecordImagePulled records that image, now imageRef, was pulled with
// creds (nil: unknown, so the next pod must verify) and drops the intent.
// A record that cannot be written keeps the intent, which the next start
// turns into a record.
func (m *Manager) RecordImagePulled(image, imageRef string, creds *kubeletv1beta1.ImagePullCredentials) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.mergeRecord(image, imageRef, creds); err != nil {
		m.log.Error("image pulled record not written", "image", image, "imageRef", imageRef, "err", err)
		return
	}
	m.dropIntent(image)
}

// RecordImagePullFailed drops the intent of a failed pull.
func (m *Manager) RecordImagePullFailed(image string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dropIntent(image)
}

func (m *Manager) dropIntent(image string) {
	if m.inflight[image] > 1 {
		m.inflight[image]--
		return
	}
	if err := m.store.deleteIntent(image); err != nil {
		m.log.Error("image pull intent not removed", "image", image, "err", err)
		return
	}
	delete(m.inflight, image)
}

// mergeRecord adds creds for image to imageRef's record (creating it);
// callers hold mu.
func (m *Manager) mergeRecord(image, imageRef string, creds *kubeletv1beta1.ImagePullCredentials) error {
	name, err := trimTagDigest(image)
	if err != nil {
		return fmt.Errorf("invalid image name %q: %w", image, err)
	}
	r, _, err := m.store.record(imageRef)
	if err != nil {
		m.log.Warn("image pulled record unreadable; writing a new one", "imageRef", imageRef, "err", err)
		r = nil
	}
	if r == nil {
		r = &kubeletv1beta1.ImagePulledRecord{ImageRef: imageRef, CredentialMapping: map[string]kubeletv1beta1.ImagePullCredentials{}}
		if creds != nil {
			r.CredentialMapping[name] = *creds
		}
	} else if !merge(r, name, creds) {
		return nil
	}
	r.LastUpdatedTime = metav1.NewTime(m.clock.Now())
	return m.store.writeRecord(r)
}

// merge adds creds to r's entry for name and says whether r changed.
// Node-wide access subsumes secrets; secrets are kept unique by
// coordinates (the newer hash wins) and sorted.
func merge(r *kubeletv1beta1.ImagePulledRecord, name string, creds *kubeletv1beta1.ImagePullCredentials) bool {
	if creds == nil || (!creds.NodePodsAccessible && len(creds.KubernetesSecrets) == 0 && len(creds.KubernetesServiceAccounts) == 0) {
		return false
	}
	if r.CredentialMapping == nil {
		r.CredentialMapping = map[string]kubeletv1beta1.ImagePullCredentials{}
	}
	cur, ok := r.CredentialMapping[name]
	switch {
	case !ok:
		r.CredentialMapping[name] = *creds
		return true
	case cur.NodePodsAccessible:
		return false
	case creds.NodePodsAccessible:
		r.CredentialMapping[name] = kubeletv1beta1.ImagePullCredentials{NodePodsAccessible: true}
		return true
	}
	changed := false
	for _, s := range creds.KubernetesSecrets {
		i := slices.IndexFunc(cur.KubernetesSecrets, func(c kubeletv1beta1.ImagePullSecret) bool {
			return c.UID == s.UID && c.Namespace == s.Namespace && c.Name == s.Name
		})
		switch {
		case i < 0:
			cur.KubernetesSecrets = append(slices.Clone(cur.KubernetesSecrets), s)
			changed = true
		case cur.KubernetesSecrets[i].CredentialHash != s.CredentialHash:
			cur.KubernetesSecrets = slices.Clone(cur.KubernetesSecrets)
			cur.KubernetesSecrets[i].CredentialHash = s.CredentialHash
			changed = true
		}
	}
	for _, sa := range creds.KubernetesServiceAccounts {
		if !slices.Contains(cur.KubernetesServiceAccounts, sa) {
			cur.KubernetesServiceAccounts = append(slices.Clone(cur.KubernetesServiceAccounts), sa)
			changed = true
		}
	}
	if !changed {
		return false
	}
	slices.SortFunc(cur.KubernetesSecrets, func(a, b kubeletv1beta1.ImagePullSecret) int {
		return strings.Compare(a.Namespace+"/"+a.Name+"/"+a.UID, b.Namespace+"/"+b.Name+"/"+b.UID)
	})
	slices.SortFunc(cur.KubernetesServiceAccounts, func(a, b kubeletv1beta1.ImagePullServiceAccount) int {
		return strings.Compare(a.Namespace+"/"+a.Name+"/"+a.UID, b.Namespace+"/"+b.Name+"/"+b.UID)
	})
	r.CredentialMapping[name] = cur
	return true
}

// MustAttemptImagePull says whether a pod asking for image, present as
// imageRef, must pull it to prove its credentials. An unreadable record
// means yes (fail safe); an error from podSecrets is returned with yes.
func (m *Manager) MustAttemptImagePull(ctx context.Context, image, imageRef string, podSecrets PodSecrets) (bool, error) {
	if imageRef == "" {
		return true, nil
	}
	m.mu.Lock()
	r, exists, err := m.store.record(imageRef)
	pulledByUs := exists || m.inflight[image] > 0
	if err == nil && !pulledByUs {
		pulledByUs, err = m.store.intentExists(image)
	}
	m.mu.Unlock()
	if err != nil {
		m.log.Error("image pull records unreadable; verifying the pod's credentials", "image", image, "imageRef", imageRef, "err", err)
		return true, nil
	}
	if !m.policy.requireVerification(image, pulledByUs) {
		return false, nil
	}
	if r == nil {
		return true, nil
	}
	name, err := trimTagDigest(image)
	if err != nil {
		return true, nil
	}
	cached, ok := r.CredentialMapping[name]
	switch {
	case !ok:
		return true, nil
	case cached.NodePodsAccessible:
		return false, nil
	case len(cached.KubernetesSecrets) == 0:
		return true, nil
	}
	secrets, err := podSecrets()
	if err != nil {
		return true, err
	}
	for _, s := range secrets {
		for _, c := range cached.KubernetesSecrets {
			sameHash := c.CredentialHash != "" && c.CredentialHash == s.CredentialHash
			sameSecret := c.UID == s.UID && c.Namespace == s.Namespace && c.Name == s.Name
			if !sameHash && !sameSecret {
				continue
			}
			// Remember this secret (or its new contents) for next time.
			if (!sameHash || !sameSecret) && len(cached.KubernetesSecrets) < matchWriteLimit {
				m.mu.Lock()
				err := m.mergeRecord(image, imageRef, &kubeletv1beta1.ImagePullCredentials{KubernetesSecrets: []kubeletv1beta1.ImagePullSecret{s}})
				m.mu.Unlock()
				if err != nil {
					m.log.Error("image pulled record not updated", "image", image, "imageRef", imageRef, "err", err)
				}
			}
			return false, nil
		}
	}
	return true, nil
}

// PruneUnknownRecords deletes the records of images not in imageIDs that
// were last updated before until (the image GC's hook: until is taken
// before the images were listed, so a record written meanwhile stays).
func (m *Manager) PruneUnknownRecords(imageIDs []string, until time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	records, err := m.store.records()
	corrupt := corruptFiles(err)
	if err != nil && len(corrupt) == 0 {
		m.log.Warn("image pulled records partly unreadable; pruning the others", "err", err)
	}
	// A corrupt record is known by its file name, the hash of its image
	// ID: one of a present image is replaced by a record that makes every
	// pod verify (store.record); one of an image gone is moved aside.
	for _, p := range corrupt {
		id := slices.IndexFunc(imageIDs, func(id string) bool { return filepath.Join(m.store.pulled, fileName(id)) == p })
		if id >= 0 {
			if _, _, err := m.store.record(imageIDs[id]); err != nil {
				m.log.Warn("corrupt image pulled record not replaced", "file", p, "err", err)
			}
			continue
		}
		if err := m.store.replaceCorrupt(p, errors.New("image pulled record does not decode; its image is not on the node"), ""); err != nil {
			m.log.Warn("corrupt image pulled record not moved aside", "file", p, "err", err)
		}
	}
	for _, r := range records {
		if !r.LastUpdatedTime.Time.Before(until) || slices.Contains(imageIDs, r.ImageRef) {
			continue
		}
		if err := m.store.deleteRecord(r.ImageRef); err != nil {
			m.log.Warn("image pulled record not removed", "imageRef", r.ImageRef, "err", err)
		}
	}
}
