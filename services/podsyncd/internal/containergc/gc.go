package containergc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubelettypes "k8s.io/kubelet/pkg/types"
	"k8s.io/utils/clock"

	"github.com/microlet/microlet/services/podsyncd/internal/containerlogs"
)

// DefaultPeriod is how often the kubelet collects containers (ContainerGCPeriod).
const DefaultPeriod = time.Minute

// Policy is the kubelet's container GC policy. The zero value is not the
// default: use DefaultPolicy.
type Policy struct {
	// MinAge is how long after its creation a dead container may be
	// collected (--minimum-container-ttl-duration, default 0).
	MinAge time.Duration
	// MaxPerPodContainer is how many dead instances each container of a
	// pod keeps (--maximum-dead-containers-per-container, default 1);
	// negative: no limit.
	MaxPerPodContainer int
	// MaxContainers is how many dead containers the node keeps in all
	// (--maximum-dead-containers, default -1); negative: no limit.
	MaxContainers int
}

// DefaultPolicy is the kubelet's default policy.
func DefaultPolicy() Policy {
	return Policy{MinAge: 0, MaxPerPodContainer: 1, MaxContainers: -1}
}

// Options are the collector's surroundings.
type Options struct {
	// PodLogsDir holds the pod log directories (<ns>_<name>_<uid>); empty
	// leaves them alone.
	PodLogsDir string
	// SymlinkDir holds the container log symlinks; empty leaves it alone.
	SymlinkDir string
	// Clock is injected for tests; nil is the real clock.
	Clock clock.Clock
	// Log is the logger; nil is slog.Default.
	Log *slog.Logger
}

// GC collects dead containers, sandboxes and log directories.
type GC struct {
	rt     criapi.RuntimeService
	policy Policy
	opts   Options

	mu sync.Mutex
	// future holds, for each container whose creation time reads after
	// now, when a pass first saw it so (see young).
	future map[string]time.Time
}

// New returns a collector over the CRI runtime rt.
func New(rt criapi.RuntimeService, policy Policy, opts Options) *GC {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	return &GC{rt: rt, policy: policy, opts: opts}
}

// Gone reports whether a pod is removed for good, so nothing of it is
// needed any more (the kubelet's ShouldPodContentBeRemoved). It must answer
// false for pods it cannot judge yet (before every source was seen).
type Gone func(uid types.UID) bool

// Result counts what one pass removed.
type Result struct {
	Containers, Sandboxes, LogDirs int
}

// GarbageCollect makes one pass. Errors of single removals are logged and
// joined into the returned error; the pass goes on.
func (g *GC) GarbageCollect(ctx context.Context, gone Gone) (Result, error) {
	return g.collect(ctx, gone, gone)
}

// DeleteAllUnused is the pass the eviction manager runs to reclaim disk
// (the kubelet's DeleteAllUnusedContainers): the containers and sandboxes
// of pods that are finished but still exist go as well as those of gone
// pods; log directories only of gone pods, as in every pass.
func (g *GC) DeleteAllUnused(ctx context.Context, gone, finished Gone) (Result, error) {
	runtimeGone := func(uid types.UID) bool { return gone(uid) || finished(uid) }
	return g.collect(ctx, runtimeGone, gone)
}

func (g *GC) collect(ctx context.Context, gone, contentGone Gone) (Result, error) {
	var res Result
	var errs []error
	cs, err := g.rt.ListContainers(ctx, nil)
	if err != nil {
		return res, fmt.Errorf("list containers: %w", err)
	}
	removed := map[string]bool{}
	for _, c := range g.plan(cs, gone) {
		if err := g.removeContainer(ctx, c); err != nil {
			errs = append(errs, err)
			continue
		}
		removed[c.Id] = true
		res.Containers++
	}
	sbs, err := g.rt.ListPodSandbox(ctx, nil)
	if err != nil {
		return res, errors.Join(append(errs, fmt.Errorf("list sandboxes: %w", err))...)
	}
	remaining := make([]*runtimeapi.Container, 0, len(cs))
	for _, c := range cs {
		if !removed[c.Id] {
			remaining = append(remaining, c)
		}
	}
	for _, sb := range PlanSandboxes(sbs, remaining, gone) {
		if err := g.removeSandbox(ctx, sb); err != nil {
			errs = append(errs, err)
			continue
		}
		res.Sandboxes++
	}
	n, err := g.removeLogDirs(ctx, contentGone)
	res.LogDirs = n
	if err != nil {
		errs = append(errs, err)
	}
	return res, errors.Join(errs...)
}

func (g *GC) removeContainer(ctx context.Context, c *runtimeapi.Container) error {
	if c.State == runtimeapi.ContainerState_CONTAINER_UNKNOWN {
		// It may still run: stop it first, as the kubelet does.
		if err := g.rt.StopContainer(ctx, c.Id, 2); err != nil {
			g.opts.Log.Warn("container gc: could not stop a container in unknown state", "container", c.Id, "err", err)
			return fmt.Errorf("stop container %s: %w", c.Id, err)
		}
	}
	if err := containerlogs.Remove(ctx, g.rt, g.opts.SymlinkDir, c.Id); err != nil {
		g.opts.Log.Warn("container gc: could not remove container logs", "container", c.Id, "err", err)
		return err
	}
	if err := g.rt.RemoveContainer(ctx, c.Id); err != nil {
		g.opts.Log.Warn("container gc: could not remove container", "container", c.Id, "err", err)
		return fmt.Errorf("remove container %s: %w", c.Id, err)
	}
	g.opts.Log.Debug("container gc: removed container", "container", c.Id, "pod", c.Labels[kubelettypes.KubernetesPodUIDLabel], "name", c.GetMetadata().GetName())
	return nil
}

func (g *GC) removeSandbox(ctx context.Context, sb *runtimeapi.PodSandbox) error {
	// Normally already stopped; stop it anyway so nothing is left running.
	if err := g.rt.StopPodSandbox(ctx, sb.Id); err != nil {
		g.opts.Log.Warn("container gc: could not stop sandbox", "sandbox", sb.Id, "err", err)
		return fmt.Errorf("stop sandbox %s: %w", sb.Id, err)
	}
	if err := g.rt.RemovePodSandbox(ctx, sb.Id); err != nil {
		g.opts.Log.Warn("container gc: could not remove sandbox", "sandbox", sb.Id, "err", err)
		return fmt.Errorf("remove sandbox %s: %w", sb.Id, err)
	}
	g.opts.Log.Debug("container gc: removed sandbox", "sandbox", sb.Id, "pod", sandboxUID(sb))
	return nil
}

// removeLogDirs removes the log directories of removed pods and dangling
// symlinks of dead containers.
func (g *GC) removeLogDirs(ctx context.Context, gone Gone) (int, error) {
	var errs []error
	n := 0
	if dir := g.opts.PodLogsDir; dir != "" {
		entries, err := os.ReadDir(dir)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("read pod logs dir: %w", err))
		}
		for _, e := range entries {
			uid := PodUIDFromLogDir(e.Name())
			if uid == "" || !gone(uid) {
				continue
			}
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				errs = append(errs, fmt.Errorf("remove pod logs %s: %w", e.Name(), err))
				continue
			}
			n++
		}
	}
	if err := containerlogs.RemoveDanglingSymlinks(ctx, g.rt, g.opts.SymlinkDir); err != nil {
		errs = append(errs, fmt.Errorf("container log symlinks: %w", err))
	}
	return n, errors.Join(errs...)
}

// PodUIDFromLogDir is the pod UID a pod log directory is named after
// (<namespace>_<name>_<uid>); "" when the name is not one.
func PodUIDFromLogDir(name string) types.UID {
	i := strings.LastIndexByte(name, '_')
	if i < 0 || i == len(name)-1 {
		return ""
	}
	return types.UID(name[i+1:])
}

func containerUID(c *runtimeapi.Container) types.UID {
	return types.UID(c.Labels[kubelettypes.KubernetesPodUIDLabel])
}

func sandboxUID(sb *runtimeapi.PodSandbox) types.UID {
	if uid := sb.GetMetadata().GetUid(); uid != "" {
		return types.UID(uid)
	}
	return types.UID(sb.Labels[kubelettypes.KubernetesPodUIDLabel])
}

// newestFirst orders containers by creation, newest first (ID breaks ties,
// so a pass is deterministic).
func newestFirst(a, b *runtimeapi.Container) int {
	if c := cmp.Compare(b.CreatedAt, a.CreatedAt); c != 0 {
		return c
	}
	return strings.Compare(a.Id, b.Id)
}

type unitKey struct {
	uid  types.UID
	name string
}

// PlanContainers is the container half of the policy: which of cs to
// remove, now, given which pods are gone. Running containers and those
// younger than MinAge are never chosen, nor the newest instance of each
// container of a pod that is not gone.
func PlanContainers(cs []*runtimeapi.Container, p Policy, now time.Time, gone Gone) []*runtimeapi.Container {
	newest := now.Add(-p.MinAge)
	return planContainers(cs, p, func(c *runtimeapi.Container) bool { return time.Unix(0, c.CreatedAt).After(newest) }, gone)
}

// plan is PlanContainers at the collector's clock, with young's ages.
func (g *GC) plan(cs []*runtimeapi.Container, gone Gone) []*runtimeapi.Container {
	return planContainers(cs, g.policy, g.young(cs, g.opts.Clock.Now()), gone)
}

// young returns the test for containers of cs younger than MinAge at now.
// A container's age is counted from its creation time, which the runtime
// dates by the wall clock; one that reads after now was created before the
// clock was stepped back, and its age is counted instead from the pass that
// first saw it so, by the collector's own clock. The kubelet skips such a
// container, with the default MinAge of 0 too, until the clock catches up:
// after a step back of a day, a day of dead containers piles up.
func (g *GC) young(cs []*runtimeapi.Container, now time.Time) func(*runtimeapi.Container) bool {
	newest := now.Add(-g.policy.MinAge)
	g.mu.Lock()
	defer g.mu.Unlock()
	seen := map[string]time.Time{}
	for _, c := range cs {
		if time.Unix(0, c.CreatedAt).After(now) {
			at, ok := g.future[c.Id]
			if !ok || at.After(now) {
				at = now
			}
			seen[c.Id] = at
		}
	}
	g.future = seen // forgets containers removed, or no longer ahead of the clock
	return func(c *runtimeapi.Container) bool {
		if at, ok := seen[c.Id]; ok {
			return at.After(newest)
		}
		return time.Unix(0, c.CreatedAt).After(newest)
	}
}

func planContainers(cs []*runtimeapi.Container, p Policy, young func(*runtimeapi.Container) bool, gone Gone) []*runtimeapi.Container {
	units := map[unitKey][]*runtimeapi.Container{}
	for _, c := range cs {
		if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			continue
		}
		if young(c) {
			continue
		}
		k := unitKey{containerUID(c), c.GetMetadata().GetName()}
		units[k] = append(units[k], c)
	}
	var out []*runtimeapi.Container
	// protected: the newest instance of each unit of a pod still there.
	protected := map[string]bool{}
	for k, list := range units {
		slices.SortFunc(list, newestFirst)
		if gone(k.uid) {
			out = append(out, list...)
			delete(units, k)
			continue
		}
		protected[list[0].Id] = true
	}
	// cut keeps the newest keep of each unit and collects the rest.
	cut := func(keep int) {
		for k, list := range units {
			if len(list) <= keep {
				continue
			}
			var kept []*runtimeapi.Container
			for i, c := range list {
				if i < keep || protected[c.Id] {
					kept = append(kept, c)
					continue
				}
				out = append(out, c)
			}
			units[k] = kept
		}
	}
	if p.MaxPerPodContainer >= 0 {
		cut(p.MaxPerPodContainer)
	}
	count := func() int {
		n := 0
		for _, l := range units {
			n += len(l)
		}
		return n
	}
	if p.MaxContainers >= 0 && count() > p.MaxContainers {
		cut(max(p.MaxContainers/max(len(units), 1), 1))
		if n := count(); n > p.MaxContainers {
			var all []*runtimeapi.Container
			for _, l := range units {
				all = append(all, l...)
			}
			slices.SortFunc(all, newestFirst)
			for _, c := range all[p.MaxContainers:] {
				if !protected[c.Id] {
					out = append(out, c)
				}
			}
		}
	}
	return out
}

// PlanSandboxes is the sandbox half: which of sbs to remove given the
// containers that remain. A sandbox that is ready or holds a container
// stays; so does the newest sandbox of a pod that is not gone.
func PlanSandboxes(sbs []*runtimeapi.PodSandbox, remaining []*runtimeapi.Container, gone Gone) []*runtimeapi.PodSandbox {
	holds := map[string]bool{}
	for _, c := range remaining {
		holds[c.PodSandboxId] = true
	}
	byPod := map[types.UID][]*runtimeapi.PodSandbox{}
	for _, sb := range sbs {
		byPod[sandboxUID(sb)] = append(byPod[sandboxUID(sb)], sb)
	}
	var out []*runtimeapi.PodSandbox
	for uid, list := range byPod {
		slices.SortFunc(list, func(a, b *runtimeapi.PodSandbox) int {
			if c := cmp.Compare(b.CreatedAt, a.CreatedAt); c != 0 {
				return c
			}
			return strings.Compare(a.Id, b.Id)
		})
		if !gone(uid) {
			list = list[1:]
		}
		for _, sb := range list {
			if sb.State == runtimeapi.PodSandboxState_SANDBOX_READY || holds[sb.Id] {
				continue
			}
			out = append(out, sb)
		}
	}
	return out
}
