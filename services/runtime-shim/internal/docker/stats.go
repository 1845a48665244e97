package docker

import (
	"context"
	"encoding/json"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func nowNano() int64 { return time.Now().UnixNano() }

// oneShotStats reads one stats sample of a container from Docker.
func (b *Backend) oneShotStats(ctx context.Context, id string) (*container.StatsResponse, error) {
	res, err := b.cli.ContainerStats(ctx, id, client.ContainerStatsOptions{Stream: false})
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	var s container.StatsResponse
	if err := json.NewDecoder(res.Body).Decode(&s); err != nil {
		return nil, err
	}
	return &s, nil
}

func criCPU(s *container.StatsResponse, ts int64) *runtimeapi.CpuUsage {
	return &runtimeapi.CpuUsage{Timestamp: ts, UsageCoreNanoSeconds: &runtimeapi.UInt64Value{Value: s.CPUStats.CPUUsage.TotalUsage}}
}

func criMemory(s *container.StatsResponse, ts int64) *runtimeapi.MemoryUsage {
	usage := s.MemoryStats.Usage
	ws := usage
	// The working set leaves out inactive page cache, as cAdvisor computes it.
	for _, k := range []string{"total_inactive_file", "inactive_file"} {
		if v, ok := s.MemoryStats.Stats[k]; ok {
			if v < ws {
				ws -= v
			} else {
				ws = 0
			}
			break
		}
	}
	return &runtimeapi.MemoryUsage{Timestamp: ts, WorkingSetBytes: &runtimeapi.UInt64Value{Value: ws}, UsageBytes: &runtimeapi.UInt64Value{Value: usage},
		RssBytes: &runtimeapi.UInt64Value{Value: s.MemoryStats.Stats["rss"]}}
}

func (b *Backend) containerStats(ctx context.Context, c *runtimeapi.Container) (*runtimeapi.ContainerStats, error) {
	out := &runtimeapi.ContainerStats{
		Attributes: &runtimeapi.ContainerAttributes{Id: c.Id, Metadata: c.Metadata, Labels: c.Labels, Annotations: c.Annotations},
	}
	ts := nowNano()
	out.WritableLayer = &runtimeapi.FilesystemUsage{Timestamp: ts, FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: "/"},
		UsedBytes: &runtimeapi.UInt64Value{}, InodesUsed: &runtimeapi.UInt64Value{}}
	if c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		out.Cpu = &runtimeapi.CpuUsage{Timestamp: ts, UsageCoreNanoSeconds: &runtimeapi.UInt64Value{}}
		out.Memory = &runtimeapi.MemoryUsage{Timestamp: ts, WorkingSetBytes: &runtimeapi.UInt64Value{}}
		return out, nil
	}
	s, err := b.oneShotStats(ctx, c.Id)
	if err != nil {
		return nil, toStatus(err, "stats of %s", c.Id)
	}
	out.Cpu, out.Memory = criCPU(s, ts), criMemory(s, ts)
	return out, nil
}

// ContainerStats returns one sample of the container's usage.
func (b *Backend) ContainerStats(ctx context.Context, req *runtimeapi.ContainerStatsRequest) (*runtimeapi.ContainerStatsResponse, error) {
	if _, err := b.inspectContainer(ctx, req.ContainerId); err != nil {
		return nil, err
	}
	cs, err := b.listContainers(ctx, &runtimeapi.ContainerFilter{Id: req.ContainerId})
	if err != nil {
		return nil, err
	}
	if len(cs) == 0 {
		return nil, notFound("container", req.ContainerId)
	}
	st, err := b.containerStats(ctx, cs[0])
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ContainerStatsResponse{Stats: st}, nil
}

// ListContainerStats returns samples of the filtered containers.
func (b *Backend) ListContainerStats(ctx context.Context, req *runtimeapi.ListContainerStatsRequest) (*runtimeapi.ListContainerStatsResponse, error) {
	f := req.GetFilter()
	cf := &runtimeapi.ContainerFilter{}
	if f != nil {
		cf.Id, cf.PodSandboxId, cf.LabelSelector = f.Id, f.PodSandboxId, f.LabelSelector
	}
	cs, err := b.listContainers(ctx, cf)
	if err != nil {
		return nil, err
	}
	out := make([]*runtimeapi.ContainerStats, 0, len(cs))
	for _, c := range cs {
		st, err := b.containerStats(ctx, c)
		if err != nil {
			if isNotFound(err) {
				continue
			}
			return nil, err
		}
		out = append(out, st)
	}
	return &runtimeapi.ListContainerStatsResponse{Stats: out}, nil
}

func (b *Backend) podStats(ctx context.Context, p *runtimeapi.PodSandbox) (*runtimeapi.PodSandboxStats, error) {
	cs, err := b.listContainers(ctx, &runtimeapi.ContainerFilter{PodSandboxId: p.Id})
	if err != nil {
		return nil, err
	}
	ts := nowNano()
	linux := &runtimeapi.LinuxPodSandboxStats{
		Cpu:    &runtimeapi.CpuUsage{Timestamp: ts, UsageCoreNanoSeconds: &runtimeapi.UInt64Value{}},
		Memory: &runtimeapi.MemoryUsage{Timestamp: ts, WorkingSetBytes: &runtimeapi.UInt64Value{}, UsageBytes: &runtimeapi.UInt64Value{}},
	}
	for _, c := range cs {
		st, err := b.containerStats(ctx, c)
		if err != nil {
			continue
		}
		linux.Containers = append(linux.Containers, st)
		linux.Cpu.UsageCoreNanoSeconds.Value += st.Cpu.GetUsageCoreNanoSeconds().GetValue()
		linux.Memory.WorkingSetBytes.Value += st.Memory.GetWorkingSetBytes().GetValue()
		linux.Memory.UsageBytes.Value += st.Memory.GetUsageBytes().GetValue()
	}
	return &runtimeapi.PodSandboxStats{
		Attributes: &runtimeapi.PodSandboxAttributes{Id: p.Id, Metadata: p.Metadata, Labels: p.Labels, Annotations: p.Annotations},
		Linux:      linux,
	}, nil
}

// PodSandboxStats sums the pod's containers' samples.
func (b *Backend) PodSandboxStats(ctx context.Context, req *runtimeapi.PodSandboxStatsRequest) (*runtimeapi.PodSandboxStatsResponse, error) {
	sb, err := b.inspectSandbox(ctx, req.PodSandboxId)
	if err != nil {
		return nil, err
	}
	st, err := b.podStats(ctx, &runtimeapi.PodSandbox{Id: sb.ID, Metadata: sb.metadata(), Labels: sb.Labels, Annotations: sb.Annotations})
	if err != nil {
		return nil, err
	}
	return &runtimeapi.PodSandboxStatsResponse{Stats: st}, nil
}

// ListPodSandboxStats samples every (filtered) ready sandbox.
func (b *Backend) ListPodSandboxStats(ctx context.Context, req *runtimeapi.ListPodSandboxStatsRequest) (*runtimeapi.ListPodSandboxStatsResponse, error) {
	f := &runtimeapi.PodSandboxFilter{}
	if rf := req.GetFilter(); rf != nil {
		f.Id, f.LabelSelector = rf.Id, rf.LabelSelector
	}
	ps, err := b.listSandboxes(ctx, f)
	if err != nil {
		return nil, err
	}
	out := make([]*runtimeapi.PodSandboxStats, 0, len(ps))
	for _, p := range ps {
		st, err := b.podStats(ctx, p)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return &runtimeapi.ListPodSandboxStatsResponse{Stats: out}, nil
}
