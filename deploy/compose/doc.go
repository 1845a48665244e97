// Package compose holds the docker compose dev box: docker-compose.yaml, the
// FROM-scratch Dockerfiles that hack/build-images.sh builds, and devbox, the
// credentials and probe tool of the control-plane image. It has no library
// code; its test brings the whole box up under its own project name, ports and
// node name and checks it against the real API server (see docs/dev-box.md).
package compose
