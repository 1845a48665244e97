// Package imagevolume gives runtime-shim's docker backend the read-only
// directories behind image volumes (a CRI Mount with image set: a pod's
// volumes[].image). Docker Engine 20.10 cannot mount an image into a
// container, so Store extracts an image's root filesystem once, keyed by the
// image's ID (the digest of its configuration, so a re-tagged or re-pulled
// name with new content gets a new directory), and the container gets a
// read-only bind mount of it.
//
// Extraction: a container created (never started) from the image, its
// filesystem exported by Docker (`docker export`) and unpacked under the
// store's directory; the container is removed at once. Entries that would
// leave the directory (absolute or ".." names, links pointing out) are
// refused, device nodes are skipped. A finished extraction is renamed into
// place, so a directory that exists is complete, also after a restart.
package imagevolume
