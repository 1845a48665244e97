// Package pullmanager is the kubelet's image pull manager
// (pkg/kubelet/images/pullmanager, feature KubeletEnsureSecretPulledImages,
// on by default in 1.36) for podsyncd: it remembers which credentials
// pulled each image, so a pod cannot use an image another pod pulled with
// credentials it does not have.
//
// Before a pull, an intent is written (image_manager/pulling); after a
// successful pull, the intent becomes a pulled record (image_manager/pulled)
// keyed by the runtime's image ID, mapping the image name without tag or
// digest to the credentials that worked: the pull secrets (coordinates and
// credential hash) or nodePodsAccessible (node-wide credentials or none).
// The files are the kubelet's own (kubelet.config.k8s.io/v1beta1
// ImagePullIntent and ImagePulledRecord as JSON, named sha256-<hex of the
// image or image ID>) under the data dir, so they survive restarts; at
// start, intents whose image the runtime has are turned into records
// without credentials (the pull finished while podsyncd was down).
//
// When a pod asks for an image that is present, MustAttemptImagePull says
// whether its credentials must be verified by pulling. The
// imagePullCredentialsVerificationPolicy decides whether verification
// applies at all: NeverVerify (never), NeverVerifyPreloadedImages (the
// default: only images the node agent pulled, i.e. with a record or an
// intent), NeverVerifyAllowlistedImages (every image but those matching
// preloadedImagesVerificationAllowlist, exact names or "prefix/*"), and
// AlwaysVerify. Verification passes when the record says nodePodsAccessible,
// or one of the pod's pull secrets matches a recorded one by credential
// hash or by coordinates (both then recorded for next time).
//
//	m, _ := pullmanager.New(dataDir, policy, images, log)
//	if present && !m.MustAttemptImagePull(ctx, image, id, podSecrets) { use it }
//	m.RecordPullIntent(image); pull; m.RecordImagePulled(image, ref, creds)
package pullmanager
