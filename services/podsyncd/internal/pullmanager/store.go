package pullmanager

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/microlet/microlet/internal/statefile"
)

// The kubelet's layout under its root directory.
const (
	dirName     = "image_manager"
	pullingDir  = "pulling"
	pulledDir   = "pulled"
	filePrefix  = "sha256-"
	tmpSuffix   = ".tmp"
	kindIntent  = "ImagePullIntent"
	kindRecord  = "ImagePulledRecord"
	fileModeOwn = 0o600
	// alphaVersion is the records' first API version.
	alphaVersion = "kubelet.config.k8s.io/v1alpha1"
)

// store reads and writes the intent and record files.
type store struct {
	pulling, pulled string
	log             *slog.Logger
}

func openStore(root string, log *slog.Logger) (*store, error) {
	s := &store{pulling: filepath.Join(root, dirName, pullingDir), pulled: filepath.Join(root, dirName, pulledDir), log: log}
	for _, d := range []string{s.pulling, s.pulled} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("image pull records: %w", err)
		}
		if _, err := statefile.Sweep(d); err != nil {
			return nil, fmt.Errorf("image pull records: %w", err)
		}
	}
	return s, nil
}

// fileName is the kubelet's name for the file of an image or image ID.
func fileName(key string) string {
	return fmt.Sprintf("%s%x", filePrefix, sha256.Sum256([]byte(key)))
}

func typeMeta(kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: kubeletv1beta1.SchemeGroupVersion.String(), Kind: kind}
}

// decode reads one file strictly: the kubelet's API group and kind, no
// unknown fields.
func decode(b []byte, kind string, into any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		return err
	}
	var tm struct{ APIVersion, Kind string }
	if err := json.Unmarshal(b, &tm); err != nil {
		return err
	}
	// v1alpha1 files (kubelets before 1.35) have the same shape; they
	// are rewritten as v1beta1 when next changed.
	if (tm.APIVersion != kubeletv1beta1.SchemeGroupVersion.String() && tm.APIVersion != alphaVersion) || tm.Kind != kind {
		return fmt.Errorf("apiVersion %q kind %q, want %s %s", tm.APIVersion, tm.Kind, kubeletv1beta1.SchemeGroupVersion, kind)
	}
	return nil
}

// write replaces dir/name crash-safely (statefile: temp file, fsync,
// rename, fsync dir).
func write(dir, name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return statefile.WriteFile(filepath.Join(dir, name), b, fileModeOwn)
}

func remove(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

func (s *store) writeIntent(image string) error {
	in := kubeletv1beta1.ImagePullIntent{TypeMeta: typeMeta(kindIntent), Image: image}
	return write(s.pulling, fileName(image), &in)
}

func (s *store) deleteIntent(image string) error {
	return remove(filepath.Join(s.pulling, fileName(image)))
}

func (s *store) intentExists(image string) (bool, error) {
	b, err := os.ReadFile(filepath.Join(s.pulling, fileName(image)))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var in kubeletv1beta1.ImagePullIntent
	if err := decode(b, kindIntent, &in); err != nil {
		return false, err
	}
	return in.Image == image, nil
}

// record returns the record of imageRef; one of another image ID is none.
// A file that does not decode is moved aside (statefile.Quarantine) and
// replaced by a record of imageRef with no credentials, which is what it
// fails safe to: the image counts as pulled by the node, so every pod must
// be verified for it (nothing is taken as preloaded), as after a pull whose
// credentials were lost. Only when that fails is it an error (exists true).
func (s *store) record(imageRef string) (*kubeletv1beta1.ImagePulledRecord, bool, error) {
	path := filepath.Join(s.pulled, fileName(imageRef))
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	var r kubeletv1beta1.ImagePulledRecord
	if err := decode(b, kindRecord, &r); err != nil {
		bad := fmt.Errorf("image pulled record %s: %w", path, err)
		if err := s.replaceCorrupt(path, bad, imageRef); err != nil {
			return nil, true, errors.Join(bad, err)
		}
		return &kubeletv1beta1.ImagePulledRecord{ImageRef: imageRef, CredentialMapping: map[string]kubeletv1beta1.ImagePullCredentials{}}, true, nil
	}
	if r.ImageRef != imageRef {
		return nil, false, nil
	}
	return &r, true, nil
}

// replaceCorrupt keeps a record file that does not decode aside. When its
// image is known (imageRef not empty) a record of it with no credentials
// takes its place in the same step (statefile.QuarantineReplace), so at no
// moment, a crash included, does the image look preloaded.
func (s *store) replaceCorrupt(path string, reason error, imageRef string) error {
	if imageRef == "" {
		_, err := statefile.Quarantine(s.log, path, reason)
		return err
	}
	r := &kubeletv1beta1.ImagePulledRecord{TypeMeta: typeMeta(kindRecord), ImageRef: imageRef, CredentialMapping: map[string]kubeletv1beta1.ImagePullCredentials{}}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = statefile.QuarantineReplace(s.log, path, reason, b, fileModeOwn)
	return err
}

func (s *store) writeRecord(r *kubeletv1beta1.ImagePulledRecord) error {
	r.TypeMeta = typeMeta(kindRecord)
	return write(s.pulled, fileName(r.ImageRef), r)
}

func (s *store) deleteRecord(imageRef string) error {
	return remove(filepath.Join(s.pulled, fileName(imageRef)))
}

// errCorrupt marks a file that does not decode, as opposed to one that
// cannot be read.
type errCorrupt struct {
	path string
	err  error
}

func (e *errCorrupt) Error() string { return fmt.Sprintf("%s: %v", e.path, e.err) }
func (e *errCorrupt) Unwrap() error { return e.err }

// corruptFiles are the paths of the errCorrupt errors in err.
func corruptFiles(err error) []string {
	var out []string
	var walk func(error)
	walk = func(err error) {
		if e, ok := err.(*errCorrupt); ok {
			out = append(out, e.path)
			return
		}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
		}
	}
	walk(err)
	return out
}

// each calls f with every record file's contents in dir (temporary
// files, files moved aside and foreign names skipped); errors are collected.
func each(dir string, f func(path string, b []byte) error) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasPrefix(n, filePrefix) || strings.HasSuffix(n, tmpSuffix) || statefile.IsQuarantined(n) {
			continue
		}
		path := filepath.Join(dir, n)
		b, err := os.ReadFile(path)
		if err == nil {
			err = f(path, b)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (s *store) intents() ([]string, error) {
	var out []string
	err := each(s.pulling, func(path string, b []byte) error {
		var in kubeletv1beta1.ImagePullIntent
		if err := decode(b, kindIntent, &in); err != nil {
			return &errCorrupt{path, err}
		}
		out = append(out, in.Image)
		return nil
	})
	return out, err
}

func (s *store) records() ([]*kubeletv1beta1.ImagePulledRecord, error) {
	var out []*kubeletv1beta1.ImagePulledRecord
	err := each(s.pulled, func(path string, b []byte) error {
		var r kubeletv1beta1.ImagePulledRecord
		if err := decode(b, kindRecord, &r); err != nil {
			return &errCorrupt{path, err}
		}
		out = append(out, &r)
		return nil
	})
	return out, err
}
