package forward

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/internal/grpcclient"
)

// Forwarder relays CRI calls to an upstream endpoint.
type Forwarder struct {
	endpoint string
	conn     *grpc.ClientConn
	latency  *prometheus.HistogramVec
}

// New dials the upstream endpoint (lazily: the connection is made and
// re-made with backoff by gRPC). reg may be nil.
func New(endpoint string, reg prometheus.Registerer) (*Forwarder, error) {
	if endpoint == "" {
		return nil, errors.New("forward: upstream endpoint is required")
	}
	conn, err := grpcclient.Dial(endpoint)
	if err != nil {
		return nil, fmt.Errorf("forward: dial %s: %w", endpoint, err)
	}
	f := &Forwarder{endpoint: endpoint, conn: conn,
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "microlet_runtime_shim_forward_upstream_seconds",
			Help:    "Latency of CRI calls relayed to the upstream runtime, by method and gRPC code.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}, []string{"method", "code"})}
	if reg != nil {
		if err := reg.Register(f.latency); err != nil {
			_ = conn.Close()
			return nil, err
		}
	}
	return f, nil
}

// Conn is the upstream connection (health checks use it).
func (f *Forwarder) Conn() *grpc.ClientConn { return f.conn }

// Close closes the upstream connection.
func (f *Forwarder) Close() error { return f.conn.Close() }

// Register registers the forwarding RuntimeService and ImageService on s.
func (f *Forwarder) Register(s grpc.ServiceRegistrar) error {
	for _, sd := range []*grpc.ServiceDesc{&runtimeapi.RuntimeService_ServiceDesc, &runtimeapi.ImageService_ServiceDesc} {
		desc, err := f.serviceDesc(sd)
		if err != nil {
			return err
		}
		s.RegisterService(desc, nil)
	}
	return nil
}

// messageType finds the Go type of a CRI message by its protobuf name.
func messageType(name protoreflect.FullName) (protoreflect.MessageType, error) {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(name)
	if err != nil {
		return nil, fmt.Errorf("forward: message %s: %w", name, err)
	}
	return mt, nil
}

// serviceDesc builds a handler-for-every-method copy of a generated ServiceDesc.
func (f *Forwarder) serviceDesc(gen *grpc.ServiceDesc) (*grpc.ServiceDesc, error) {
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(gen.ServiceName))
	if err != nil {
		return nil, fmt.Errorf("forward: service %s: %w", gen.ServiceName, err)
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return nil, fmt.Errorf("forward: %s is not a service", gen.ServiceName)
	}
	out := &grpc.ServiceDesc{ServiceName: gen.ServiceName, HandlerType: gen.HandlerType, Metadata: gen.Metadata}
	methods := sd.Methods()
	for i := 0; i < methods.Len(); i++ {
		m := methods.Get(i)
		in, err := messageType(m.Input().FullName())
		if err != nil {
			return nil, err
		}
		res, err := messageType(m.Output().FullName())
		if err != nil {
			return nil, err
		}
		full := "/" + gen.ServiceName + "/" + string(m.Name())
		if m.IsStreamingClient() || m.IsStreamingServer() {
			out.Streams = append(out.Streams, grpc.StreamDesc{
				StreamName:    string(m.Name()),
				ServerStreams: m.IsStreamingServer(),
				ClientStreams: m.IsStreamingClient(),
				Handler:       f.streamHandler(full, in, res, m.IsStreamingClient(), m.IsStreamingServer()),
			})
			continue
		}
		out.Methods = append(out.Methods, grpc.MethodDesc{MethodName: string(m.Name()), Handler: f.unaryHandler(full, in, res)})
	}
	return out, nil
}

// outgoing copies the caller's metadata onto the upstream call.
func outgoing(ctx context.Context) context.Context {
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		md = md.Copy()
		for _, k := range []string{":authority", "content-type", "user-agent", "te"} {
			delete(md, k)
		}
		return metadata.NewOutgoingContext(ctx, md)
	}
	return ctx
}

func (f *Forwarder) observe(method string, start time.Time, err error) {
	f.latency.WithLabelValues(method, status.Code(err).String()).Observe(time.Since(start).Seconds())
}

func (f *Forwarder) unaryHandler(full string, in, res protoreflect.MessageType) func(any, context.Context, func(any) error, grpc.UnaryServerInterceptor) (any, error) {
	return func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		req := in.New().Interface()
		if err := dec(req); err != nil {
			return nil, err
		}
		call := func(ctx context.Context, req any) (any, error) {
			start := time.Now()
			reply := res.New().Interface()
			err := f.conn.Invoke(outgoing(ctx), full, req, reply)
			f.observe(full, start, err)
			if err != nil {
				return nil, err
			}
			return reply, nil
		}
		if interceptor == nil {
			return call(ctx, req)
		}
		return interceptor(ctx, req, &grpc.UnaryServerInfo{Server: srv, FullMethod: full}, call)
	}
}

func (f *Forwarder) streamHandler(full string, in, res protoreflect.MessageType, clientStreams, serverStreams bool) grpc.StreamHandler {
	desc := &grpc.StreamDesc{StreamName: full, ClientStreams: clientStreams, ServerStreams: serverStreams}
	return func(_ any, ss grpc.ServerStream) (err error) {
		start := time.Now()
		defer func() { f.observe(full, start, err) }()
		ctx, cancel := context.WithCancel(outgoing(ss.Context()))
		defer cancel()
		cs, err := f.conn.NewStream(ctx, desc, full)
		if err != nil {
			return err
		}
		// Caller -> upstream.
		upErr := make(chan error, 1)
		go func() {
			for {
				m := in.New().Interface()
				if err := ss.RecvMsg(m); err != nil {
					if errors.Is(err, io.EOF) {
						upErr <- cs.CloseSend()
						return
					}
					cancel()
					upErr <- err
					return
				}
				if err := cs.SendMsg(m); err != nil {
					upErr <- nil // the upstream's error arrives through RecvMsg
					return
				}
				if !clientStreams {
					upErr <- cs.CloseSend()
					return
				}
			}
		}()
		// Upstream -> caller.
		// Relay the header at once: callers use it to know the upstream
		// stream is established (e.g. GetContainerEvents subscribed).
		if hdr, err := cs.Header(); err == nil {
			_ = ss.SendHeader(hdr)
		}
		for {
			m := res.New().Interface()
			if err := cs.RecvMsg(m); err != nil {
				if errors.Is(err, io.EOF) {
					ss.SetTrailer(cs.Trailer())
					return nil
				}
				return err
			}
			if err := ss.SendMsg(m); err != nil {
				return err
			}
		}
	}
}
