// Package server is the runtime-shim service: a CRI v1 RuntimeService and
// ImageService on runtime.sock, backed either by the Docker Engine
// (--backend=docker, package docker) or by another CRI endpoint
// (--backend=forward --forward-endpoint=unix:///..., package forward).
//
// The service reports SERVING only once its backend answers: Docker pinged
// and the pause image present, or the upstream runtime's Version answered.
// Until then it retries with backoff and logs why it is waiting.
package server
