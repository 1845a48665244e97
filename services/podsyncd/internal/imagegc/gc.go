package imagegc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/microlet/microlet/services/podsyncd/internal/kubeletmetrics"
)

// DefaultPeriod is how often the kubelet collects images (ImageGCPeriod).
const DefaultPeriod = 5 * time.Minute

// Node event reasons, the kubelet's.
const (
	ReasonFreeDiskSpaceFailed = "FreeDiskSpaceFailed"
	ReasonInvalidDiskCapacity = "InvalidDiskCapacity"
	ReasonImageGCFailed       = "ImageGCFailed"
)

// Policy is the kubelet's image GC policy (KubeletConfiguration
// imageGCHighThresholdPercent, imageGCLowThresholdPercent,
// imageMinimumGCAge, imageMaximumGCAge).
type Policy struct {
	HighThresholdPercent int
	LowThresholdPercent  int
	MinAge               time.Duration
	// MaxAge removes images unused for longer, whatever the disk usage; 0 is off.
	MaxAge time.Duration
}

// DefaultPolicy is the kubelet's default.
func DefaultPolicy() Policy {
	return Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: 2 * time.Minute}
}

// Disabled is the kubelet's switch-off: a high threshold of 100 and no MaxAge.
func (p Policy) Disabled() bool { return p.HighThresholdPercent == 100 && p.MaxAge == 0 }

// FsStats is the image filesystem's capacity and available bytes.
type FsStats func(ctx context.Context) (capacity, available uint64, err error)

// Options are the collector's surroundings.
type Options struct {
	// FsStats measures the image filesystem; nil statfs-es the mountpoint
	// the image service reports in ImageFsInfo.
	FsStats FsStats
	// Recorder records node events; nil records none.
	Recorder record.EventRecorder
	// NodeName names the node the events are about.
	NodeName string
	// Clock is injected for tests; nil is the real clock.
	Clock clock.Clock
	// Log is the logger; nil is slog.Default.
	Log *slog.Logger
	// AfterPass is called after every pass (GarbageCollect or
	// DeleteUnusedImages) that listed the images, with
	// the IDs of the images still there and the pass's start (taken
	// before the listing): the kubelet's post-GC hook, which prunes the
	// image pull records of images that are gone.
	AfterPass func(imageIDs []string, began time.Time)
	// Metrics counts removed images by reason
	// (kubelet_image_garbage_collected_total); nil counts nothing.
	Metrics *kubeletmetrics.Metrics
}

// record is what the collector knows of one image.
type imageRecord struct {
	firstDetected time.Time
	lastUsed      time.Time // zero: not seen in use since start
	size          uint64
	pinned        bool
}

// GC collects images.
type GC struct {
	rt     criapi.RuntimeService
	img    criapi.ImageManagerService
	policy Policy
	opts   Options
	began  time.Time

	mu      sync.Mutex // one pass at a time; guards records
	records map[string]*imageRecord
}

// New returns a collector over the CRI services; its MaxAge counts from now.
func New(rt criapi.RuntimeService, img criapi.ImageManagerService, policy Policy, opts Options) *GC {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	g := &GC{rt: rt, img: img, policy: policy, opts: opts, records: map[string]*imageRecord{}}
	if g.opts.FsStats == nil {
		g.opts.FsStats = g.statfsImageFs
	}
	g.began = opts.Clock.Now()
	return g
}

// Run collects every period until ctx ends; a disabled policy does nothing.
func (g *GC) Run(ctx context.Context, period time.Duration) {
	if g.policy.Disabled() {
		g.opts.Log.Info("image garbage collection off (high threshold 100, no maximum age)")
		return
	}
	t := time.NewTicker(period)
	defer t.Stop()
	failedBefore := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		_, err := g.GarbageCollect(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			g.opts.Log.Warn("image garbage collection failed", "err", err)
			if failedBefore {
				// Only repeated failures become an event, as the kubelet's.
				g.event(corev1.EventTypeWarning, ReasonImageGCFailed, err.Error())
			}
			failedBefore = true
		case err == nil:
			failedBefore = false
		}
	}
}

// Result is what one pass did.
type Result struct {
	// Removed are the IDs of the removed images, in removal order.
	Removed []string
	// Freed is the sum of their sizes.
	Freed uint64
	// UsagePercent is the image filesystem's usage the pass saw (-1 when
	// it did not measure it).
	UsagePercent int
}

// candidate is an image that may be removed.
type candidate struct {
	id string
	imageRecord
}

// GarbageCollect makes one pass.
func (g *GC) GarbageCollect(ctx context.Context) (Result, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	res := Result{UsagePercent: -1}
	now := g.opts.Clock.Now()
	cands, err := g.candidates(ctx, now)
	if err != nil {
		return res, err
	}
	defer g.afterPass(now)
	var errs []error
	if g.policy.MaxAge > 0 && now.Sub(g.began) > g.policy.MaxAge {
		kept := cands[:0]
		for _, c := range cands {
			if now.Sub(c.lastUsed) <= g.policy.MaxAge {
				kept = append(kept, c)
				continue
			}
			if err := g.remove(ctx, c, kubeletmetrics.ImageGCAge, &res); err != nil {
				errs = append(errs, err)
				kept = append(kept, c)
			}
		}
		cands = kept
	}
	if len(errs) > 0 {
		return res, fmt.Errorf("removing images unused for more than %s: %w", g.policy.MaxAge, errors.Join(errs...))
	}
	capacity, available, err := g.opts.FsStats(ctx)
	if err != nil {
		return res, fmt.Errorf("image filesystem stats: %w", err)
	}
	available = min(available, capacity)
	if capacity == 0 {
		msg := "invalid capacity 0 on image filesystem"
		g.event(corev1.EventTypeWarning, ReasonInvalidDiskCapacity, msg)
		return res, errors.New(msg)
	}
	res.UsagePercent = 100 - int(available*100/capacity)
	if res.UsagePercent < g.policy.HighThresholdPercent {
		return res, nil
	}
	target := int64(capacity*uint64(100-g.policy.LowThresholdPercent)/100) - int64(available)
	g.opts.Log.Info("image filesystem over the high threshold; freeing down to the low threshold",
		"usagePercent", res.UsagePercent, "high", g.policy.HighThresholdPercent, "low", g.policy.LowThresholdPercent, "bytesToFree", target)
	before := res.Freed
	for _, c := range cands {
		if int64(res.Freed-before) >= target {
			break
		}
		if now.Sub(c.firstDetected) < g.policy.MinAge {
			continue // maybe just pulled, for a container about to start
		}
		if err := g.remove(ctx, c, kubeletmetrics.ImageGCSpace, &res); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return res, fmt.Errorf("wanted to free %d bytes, freed %d with errors: %w", target, res.Freed-before, errors.Join(errs...))
	}
	if freed := res.Freed - before; int64(freed) < target {
		msg := fmt.Sprintf("Insufficient free disk space on the node's image filesystem (%d%% of %s used). "+
			"Failed to free sufficient space by deleting unused images (freed %d bytes). "+
			"Investigate disk usage, as it could be used by active images, logs, volumes, or other data.",
			res.UsagePercent, formatSize(capacity), freed)
		g.event(corev1.EventTypeWarning, ReasonFreeDiskSpaceFailed, msg)
		return res, errors.New(msg)
	}
	return res, nil
}

// DeleteUnusedImages removes every candidate at least MinAge old, whatever
// the disk usage (the eviction manager's node-level reclaim).
func (g *GC) DeleteUnusedImages(ctx context.Context) (Result, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	res := Result{UsagePercent: -1}
	now := g.opts.Clock.Now()
	cands, err := g.candidates(ctx, now)
	if err != nil {
		return res, err
	}
	defer g.afterPass(now)
	var errs []error
	for _, c := range cands {
		if now.Sub(c.firstDetected) < g.policy.MinAge {
			continue
		}
		if err := g.remove(ctx, c, kubeletmetrics.ImageGCSpace, &res); err != nil {
			errs = append(errs, err)
		}
	}
	return res, errors.Join(errs...)
}

// afterPass hands the images still recorded (every listed image but
// those removed) to the AfterPass hook; callers hold mu.
func (g *GC) afterPass(began time.Time) {
	if g.opts.AfterPass == nil {
		return
	}
	ids := make([]string, 0, len(g.records))
	for id := range g.records {
		ids = append(ids, id)
	}
	g.opts.AfterPass(ids, began)
}

func (g *GC) remove(ctx context.Context, c candidate, why string, res *Result) error {
	if err := g.img.RemoveImage(ctx, &runtimeapi.ImageSpec{Image: c.id}); err != nil {
		g.opts.Log.Warn("image gc: could not remove image", "image", c.id, "err", err)
		return fmt.Errorf("remove image %s: %w", c.id, err)
	}
	g.opts.Log.Info("image gc: removed image", "image", c.id, "size", c.size, "reason", why)
	delete(g.records, c.id)
	g.opts.Metrics.ImageCollected(why)
	res.Removed = append(res.Removed, c.id)
	res.Freed += c.size
	return nil
}

// candidates refreshes the records and returns the images that are neither
// in use nor pinned, in removal order.
func (g *GC) candidates(ctx context.Context, now time.Time) ([]candidate, error) {
	images, err := g.img.ListImages(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("list images: %w", err)
	}
	cs, err := g.rt.ListContainers(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	inUse := make(map[string]bool, len(cs))
	mounted := map[string]bool{}
	for _, c := range cs {
		// ImageId since CRI v1.30; older runtimes fill ImageRef only.
		id := c.ImageId
		if id == "" {
			id = c.ImageRef
		}
		inUse[id] = true
		// Image volumes: the images a container mounts, as its status
		// reports them (the kubelet asks every container too).
		st, err := g.rt.ContainerStatus(ctx, c.Id, false)
		if err != nil {
			if status.Code(err) == codes.NotFound {
				continue // removed since the listing
			}
			return nil, fmt.Errorf("container %s status: %w", c.Id, err)
		}
		for _, m := range st.GetStatus().GetMounts() {
			if ref := m.GetImage().GetImage(); ref != "" {
				mounted[ref] = true
			}
		}
	}
	seen := make(map[string]bool, len(images))
	for _, im := range images {
		seen[im.Id] = true
		// A mount names the image by ID (the kubelet's choice) or by a
		// name the runtime also knows it by.
		if mounted[im.Id] || slices.ContainsFunc(slices.Concat(im.RepoTags, im.RepoDigests), func(n string) bool { return mounted[n] }) {
			inUse[im.Id] = true
		}
		r := g.records[im.Id]
		if r == nil {
			r = &imageRecord{firstDetected: now}
			g.records[im.Id] = r
		}
		if inUse[im.Id] {
			r.lastUsed = now
		}
		r.size, r.pinned = im.Size, im.Pinned
	}
	var out []candidate
	for id, r := range g.records {
		if !seen[id] {
			delete(g.records, id)
			continue
		}
		if inUse[id] || r.pinned {
			continue
		}
		out = append(out, candidate{id: id, imageRecord: *r})
	}
	slices.SortFunc(out, func(a, b candidate) int {
		if c := a.lastUsed.Compare(b.lastUsed); c != 0 {
			return c
		}
		if c := a.firstDetected.Compare(b.firstDetected); c != 0 {
			return c
		}
		return cmp.Compare(a.id, b.id)
	})
	return out, nil
}

// statfsImageFs measures the filesystem of the mountpoint the image service
// reports, as the kubelet's cadvisor does for the image filesystem.
func (g *GC) statfsImageFs(ctx context.Context) (uint64, uint64, error) {
	resp, err := g.img.ImageFsInfo(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("ImageFsInfo: %w", err)
	}
	var mount string
	for _, fs := range resp.GetImageFilesystems() {
		if m := fs.GetFsId().GetMountpoint(); m != "" {
			mount = m
			break
		}
	}
	if mount == "" {
		return 0, 0, errors.New("ImageFsInfo reports no image filesystem mountpoint")
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(mount, &st); err != nil {
		return 0, 0, fmt.Errorf("statfs %s (the image filesystem's mountpoint; podsyncd must see the runtime's filesystem): %w", mount, err)
	}
	bsize := uint64(st.Bsize) //nolint:gosec // a block size is positive
	return st.Blocks * bsize, st.Bavail * bsize, nil
}

func (g *GC) event(eventtype, reason, msg string) {
	if g.opts.Recorder == nil {
		return
	}
	// The kubelet's node reference: the UID is the node's name.
	ref := &corev1.ObjectReference{Kind: "Node", Name: g.opts.NodeName, UID: types.UID(g.opts.NodeName)}
	g.opts.Recorder.Event(ref, eventtype, reason, msg)
}

// formatSize writes bytes in binary units with one decimal, as the kubelet's message does.
func formatSize(b uint64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	f, i := float64(b), 0
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%d B", b)
	}
	return strings.TrimSpace(fmt.Sprintf("%.1f %s", f, units[i]))
}
