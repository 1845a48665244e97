# microlet — `make help` lists the targets.
SHELL := /usr/bin/env bash
GO ?= go
BIN := $(CURDIR)/bin
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/microlet/microlet/internal/version.Version=$(VERSION)
SERVICES := podconfig statusd nodestatusd cloudsyncd runtime-shim nodeapi podsyncd
RUN_DIR ?= /tmp/microlet-run
DATA_DIR ?= /tmp/microlet-data
MANIFEST_DIR ?= $(CURDIR)/examples/manifests
TEST_TIMEOUT ?= 60m
# DURATION is how long `make soak` injects faults.
DURATION ?= 20m
# SEED replays a soak run: the seed a run printed gives the same faults and churn.
SEED ?=

.PHONY: help build hello-image run footprint status get-pods get-node proto check-proto generate check-generate lint test test-deps bench ci clean

help: ## list the targets
	@awk 'BEGIN{FS=":.*## "} /^[a-zA-Z_-]+:.*## /{printf "  %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## build microlet, every service binary and microlet-services (all services in one, what microlet run starts) into bin/ (static)
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/microlet ./cmd/microlet
	@for s in $(SERVICES); do CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/$$s ./services/$$s || exit 1; done
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/microlet-services ./cmd/microlet-services
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/pause ./services/runtime-shim/pause

HELLO_IMAGE ?= microlet.local/hello:1.0

hello-image: ## import the example pod's image (examples/hello, FROM scratch) into Docker; no registry needed
	@mkdir -p $(BIN)/hello-image
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $(BIN)/hello-image/hello ./examples/hello
	tar -C $(BIN)/hello-image -c hello | docker import --change 'ENTRYPOINT ["/hello"]' - $(HELLO_IMAGE)

run: build hello-image ## run microlet standalone with the example manifests (Ctrl-C stops it)
	$(BIN)/microlet run --run-dir $(RUN_DIR) --data-dir $(DATA_DIR) --manifest-dir $(MANIFEST_DIR)

status: ## show the services of a running `make run`
	$(BIN)/microlet status --run-dir $(RUN_DIR)

get-pods: ## show the pods of a running `make run` (or: export MICROLET_RUN_DIR=$(RUN_DIR); bin/microlet get pods)
	$(BIN)/microlet get pods --run-dir $(RUN_DIR)

get-node: ## show the Node of a running `make run`
	$(BIN)/microlet get node --run-dir $(RUN_DIR)

footprint: build hello-image ## start the stack standalone, wait until healthy and idle, print per-process CPU, RSS and PSS and their sum, stop it (SETTLE, SAMPLE)
	hack/footprint.sh

proto: ## regenerate the Go code from proto/ with buf
	"$$(hack/tool.sh buf)" generate

check-proto: ## fail when the committed generated code differs from the protos
	hack/check-proto.sh

generate: ## regenerate podconfig's mirror of Kubernetes' internal core types (services/podconfig/gen), the kubelet's flag list and feature gates, kubeadm's KubeletConfiguration and the KubeletConfiguration field table (docs/kubelet-config-fields.md)
	cd services/podconfig/gen && $(GO) run ./cmd/gencore > ../internal/manifest/internal/core/zz_generated.types.go.tmp
	mv services/podconfig/internal/manifest/internal/core/zz_generated.types.go.tmp services/podconfig/internal/manifest/internal/core/zz_generated.types.go
	cd test/kubeletconfig && $(GO) run ./cmd/kubeletflags > ../../internal/kubeletconfig/kubelet_flags.txt.tmp
	mv internal/kubeletconfig/kubelet_flags.txt.tmp internal/kubeletconfig/kubelet_flags.txt
	cd test/kubeletconfig && $(GO) run ./cmd/kubeadmconfig > ../../internal/kubeletconfig/testdata/kubeadm.yaml.tmp
	mv internal/kubeletconfig/testdata/kubeadm.yaml.tmp internal/kubeletconfig/testdata/kubeadm.yaml
	cd test/kubeletconfig && $(GO) run ./cmd/kubeletgates > ../../internal/kubeletconfig/zz_generated_featuregates.go.tmp
	mv internal/kubeletconfig/zz_generated_featuregates.go.tmp internal/kubeletconfig/zz_generated_featuregates.go
	$(GO) run ./internal/kubeletconfig/cmd/gendocs > docs/kubelet-config-fields.md.tmp
	mv docs/kubelet-config-fields.md.tmp docs/kubelet-config-fields.md

check-generate: ## fail when the committed generated code differs from what make generate writes
	hack/check-generate.sh

lint: ## go vet, golangci-lint, buf lint, tracked-file size guard, every module loads from its own go.sum
	hack/check-modules.sh
	$(GO) vet ./...
	"$$(hack/tool.sh golangci-lint)" run --allow-parallel-runners ./...
	"$$(hack/tool.sh buf)" lint
	hack/check-size.sh
	hack/check-k8s-versions.sh

test-deps: ## install what the tests need (Debian packages, cached builds)
	hack/install-test-deps.sh

test: test-deps ## run the whole test suite with the race detector, against the real control plane and Docker (and test/kubeletconfig, which pins our KubeletConfiguration defaulting and validation to the kubelet's own, and services/podsyncd/upstream, which pins our probes to the kubelet's probers)
	MICROLET_REQUIRE_CONTROLPLANE=1 $(GO) test -race -timeout $(TEST_TIMEOUT) ./...
	cd test/kubeletconfig && GOWORK=off $(GO) test -timeout $(TEST_TIMEOUT) ./...
	cd services/podsyncd/upstream && GOWORK=off $(GO) test -race -timeout $(TEST_TIMEOUT) ./...

soak: test-deps ## chaos soak: one node under pod churn while its services are killed, its runtime restarted, the API server stopped and its disk filled; invariants checked, one summary table (DURATION, default 20m; make test runs DURATION=3m; SEED replays a run)
	MICROLET_SOAK_DURATION=$(DURATION) MICROLET_SOAK_SEED=$(SEED) MICROLET_REQUIRE_CONTROLPLANE=1 $(GO) test -race -count=1 -v -timeout 3h -run TestSoak ./test/soak/

bench: ## run every benchmark that finishes in bounded time, short -benchtime (BENCH_SET=unit|node, HEAVY=1 adds the long runs, DRY_RUN=1 lists them; hack/bench.sh)
	hack/bench.sh

ci: check-proto check-generate lint test ## what .ci/run runs

clean: ## remove build outputs
	rm -rf $(BIN)

# Built then exec'd rather than `go run`, which exits 1 on every Ctrl-C.
.PHONY: dev-controlplane
dev-controlplane: ## run etcd, kube-apiserver, kube-scheduler and kube-controller-manager in the foreground and print admin/node kubeconfigs (Ctrl-C stops; needs make test-deps)
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/devcontrolplane ./hack/devcontrolplane && exec $(BIN)/devcontrolplane $(DEVCP_ARGS)

# The compose dev box (deploy/compose, docs/dev-box.md). `docker compose` v2
# when the CLI has it, else Debian's docker-compose v1.
COMPOSE ?= $(shell docker compose version >/dev/null 2>&1 && echo "docker compose" || echo docker-compose)
COMPOSE_PROJECT ?= microlet
COMPOSE_ARGS = -f deploy/compose/docker-compose.yaml -p $(COMPOSE_PROJECT)

.PHONY: images compose-up compose-down
images: ## build the FROM-scratch images of the compose dev box (tag $MICROLET_IMAGE_TAG, default dev)
	hack/build-images.sh

compose-up: images ## start the compose dev box: etcd, kube-apiserver and every service, health-checked
	$(COMPOSE) $(COMPOSE_ARGS) up -d
	$(COMPOSE) $(COMPOSE_ARGS) ps

compose-down: ## stop the compose dev box and remove its containers and volumes
	$(COMPOSE) $(COMPOSE_ARGS) down -v --remove-orphans

# Kubernetes' own e2e suite on a cluster whose only node is microlet
# (test/conformance, docs/conformance.md). SUITE (node | nodeconformance | e2enode | full), FOCUS, SKIP, PROCS, RESULTS,
# DRY_RUN, RUNTIME_ONLY=1 (the upstream kubelet on runtime-shim as the node);
# SUITE=full runs every [Conformance] spec on a make cluster cluster (NODE_AGENT=kubelet:
# the upstream kubelet's column): see hack/conformance.sh.
.PHONY: conformance conformance-report
# The multi-node cluster (docs/cluster.md): kind-style node containers
# running containerd and microlet, a control-plane node, the add-ons.
NODES ?= 2
CLUSTER_NAME ?= microlet
CLUSTER = $(GO) run ./test/cluster/cmd/cluster

.PHONY: cluster cluster-down cluster-load
NODE_AGENT ?= microlet
cluster: test-deps ## bring up a cluster: a control-plane node and NODES (default 2, up to 4) workers, microlet on containerd (NODE_AGENT=kubelet: the upstream kubelet), kube-proxy, CoreDNS, metrics-server; prints export KUBECONFIG=...
	$(CLUSTER) up -name $(CLUSTER_NAME) -workers $(NODES) -agent $(NODE_AGENT)

cluster-down: ## remove every container, network and volume make cluster made
	$(CLUSTER) down -name $(CLUSTER_NAME)

cluster-load: ## load images from this machine's Docker into every node: make cluster-load IMAGE="name:tag ..."
	$(CLUSTER) load -name $(CLUSTER_NAME) $(IMAGE)

conformance: ## run the sig-node [Conformance] e2e specs against one microlet node (RUNTIME_ONLY=1: the upstream kubelet on runtime-shim); rewrites docs/conformance.md (SUITE=nodeconformance, FOCUS/SKIP/PROCS pick others; SUITE=e2enode: e2e_node.test's [NodeConformance] specs; SUITE=full: all 446 on make cluster)
	hack/conformance.sh

conformance-report: ## regenerate docs/conformance.md from the recorded runs (test/conformance/runs/), or JUNIT="[NAME=]FILE ..."
	hack/conformance-report.sh $(JUNIT)

# microlet and the upstream kubelet side by side (test/benchvs,
# docs/performance.md): one control plane, runtime-shim on Docker, the two
# agents one after the other. Opt-in: not part of make test.
BATCHES ?= 10,30,100
IDLE ?= 60s
STEADY_PODS ?= 110
STEADY ?= 2m
CHURN ?= 2m
.PHONY: bench-vs-kubelet bench-vs-kubelet-report
bench-vs-kubelet: test-deps ## measure microlet and the upstream kubelet v1.36.3 on runtime-shim in one run: pod startup/deletion (BATCHES), idle (IDLE), STEADY_PODS pods (STEADY) and churn at 5 pods/s (CHURN): CPU, PSS, API requests, CRI calls; records test/benchvs/runs/<time>.json, writes docs/performance.md
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/benchvs ./test/benchvs/cmd/benchvs
	$(BIN)/benchvs run -kubelet "$$(hack/build-kubelet.sh)" -batches $(BATCHES) -idle $(IDLE) -steady-pods $(STEADY_PODS) -steady $(STEADY) -churn $(CHURN) \
	  -report docs/performance.md -command "make bench-vs-kubelet BATCHES=$(BATCHES) IDLE=$(IDLE) STEADY_PODS=$(STEADY_PODS) STEADY=$(STEADY) CHURN=$(CHURN)"

bench-vs-kubelet-report: ## regenerate docs/performance.md from the newest record in test/benchvs/runs/
	$(GO) run ./test/benchvs/cmd/benchvs report
