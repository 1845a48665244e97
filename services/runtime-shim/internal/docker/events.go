package docker

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/moby/moby/api/types/events"
	"github.com/moby/moby/client"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func eventType(action events.Action) (runtimeapi.ContainerEventType, bool) {
	switch action {
	case events.ActionCreate:
		return runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT, true
	case events.ActionStart:
		return runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT, true
	case events.ActionDie:
		return runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT, true
	case events.ActionDestroy:
		return runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT, true
	}
	return 0, false
}

// GetContainerEvents streams lifecycle events of our sandboxes and
// containers, built from Docker's event stream, until the caller goes away
// (podsyncd's event-driven PLEG consumes it).
func (b *Backend) GetContainerEvents(_ *runtimeapi.GetEventsRequest, stream grpc.ServerStreamingServer[runtimeapi.ContainerEventResponse]) error {
	ctx := stream.Context()
	f := client.Filters{}
	f.Add("type", string(events.ContainerEventType))
	f.Add("label", LabelInstance+"="+b.opts.Instance)
	for _, a := range []events.Action{events.ActionCreate, events.ActionStart, events.ActionDie, events.ActionDestroy} {
		f.Add("event", string(a))
	}
	// Since makes Docker replay what happened between this call and the
	// moment its subscription is in place, so the header sent below really
	// means "no event is missed from here on".
	now := time.Now()
	res := b.cli.Events(ctx, client.EventsListOptions{Filters: f, Since: fmt.Sprintf("%d.%09d", now.Unix(), now.Nanosecond())})
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-res.Err:
			if ctx.Err() != nil || errors.Is(err, io.EOF) {
				return nil
			}
			return toStatus(err, "docker events")
		case m := <-res.Messages:
			typ, ok := eventType(m.Action)
			if !ok {
				continue
			}
			ev := &runtimeapi.ContainerEventResponse{ContainerId: m.Actor.ID, ContainerEventType: typ, CreatedAt: m.TimeNano}
			attrs := m.Actor.Attributes
			sandboxID := attrs[LabelSandboxID]
			if attrs[LabelType] == typeSandbox {
				sandboxID = m.Actor.ID
			}
			if sandboxID != "" && typ != runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT {
				if sb, err := b.inspectSandbox(ctx, sandboxID); err == nil {
					ev.PodSandboxStatus = b.toPodSandboxStatus(sb)
				}
			}
			if attrs[LabelType] == typeContainer && typ != runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT {
				if ct, err := b.inspectContainer(ctx, m.Actor.ID); err == nil {
					ev.ContainersStatuses = []*runtimeapi.ContainerStatus{b.containerStatus(ct)}
				}
			}
			if err := stream.Send(ev); err != nil {
				return err
			}
		}
	}
}

// StreamPodSandboxes sends the filtered sandboxes in one message.
func (b *Backend) StreamPodSandboxes(req *runtimeapi.StreamPodSandboxesRequest, stream grpc.ServerStreamingServer[runtimeapi.StreamPodSandboxesResponse]) error {
	items, err := b.listSandboxes(stream.Context(), req.GetFilter())
	if err != nil {
		return err
	}
	return stream.Send(&runtimeapi.StreamPodSandboxesResponse{PodSandboxes: items})
}

// StreamContainers sends the filtered containers in one message.
func (b *Backend) StreamContainers(req *runtimeapi.StreamContainersRequest, stream grpc.ServerStreamingServer[runtimeapi.StreamContainersResponse]) error {
	items, err := b.listContainers(stream.Context(), req.GetFilter())
	if err != nil {
		return err
	}
	return stream.Send(&runtimeapi.StreamContainersResponse{Containers: items})
}

// StreamContainerStats sends the filtered containers' stats in one message.
func (b *Backend) StreamContainerStats(req *runtimeapi.StreamContainerStatsRequest, stream grpc.ServerStreamingServer[runtimeapi.StreamContainerStatsResponse]) error {
	resp, err := b.ListContainerStats(stream.Context(), &runtimeapi.ListContainerStatsRequest{Filter: req.GetFilter()})
	if err != nil {
		return err
	}
	return stream.Send(&runtimeapi.StreamContainerStatsResponse{ContainerStats: resp.Stats})
}

// StreamPodSandboxStats sends the filtered sandboxes' stats in one message.
func (b *Backend) StreamPodSandboxStats(req *runtimeapi.StreamPodSandboxStatsRequest, stream grpc.ServerStreamingServer[runtimeapi.StreamPodSandboxStatsResponse]) error {
	resp, err := b.ListPodSandboxStats(stream.Context(), &runtimeapi.ListPodSandboxStatsRequest{Filter: req.GetFilter()})
	if err != nil {
		return err
	}
	return stream.Send(&runtimeapi.StreamPodSandboxStatsResponse{PodSandboxStats: resp.Stats})
}

// StreamImages sends the filtered images in one message.
func (b *Backend) StreamImages(req *runtimeapi.StreamImagesRequest, stream grpc.ServerStreamingServer[runtimeapi.StreamImagesResponse]) error {
	resp, err := b.ListImages(stream.Context(), &runtimeapi.ListImagesRequest{Filter: req.GetFilter()})
	if err != nil {
		return err
	}
	return stream.Send(&runtimeapi.StreamImagesResponse{Images: resp.Images})
}
