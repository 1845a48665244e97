package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/duration"
	nodeutil "k8s.io/component-helpers/node/util"
	"sigs.k8s.io/yaml"

	"github.com/microlet/microlet/internal/components"
	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/socket"
	nodestatusv1 "github.com/microlet/microlet/proto/microlet/nodestatus/v1"
	podconfigv1 "github.com/microlet/microlet/proto/microlet/podconfig/v1"
	statusdv1 "github.com/microlet/microlet/proto/microlet/statusd/v1"
)

// getOpts are the flags shared by `get pods` and `get node`.
type getOpts struct {
	runDir     string
	output     string
	timeout    time.Duration
	podconfig  string
	statusd    string
	nodestatus string
}

func (o *getOpts) endpoint(set, name string) (string, error) {
	ep := set
	if ep == "" {
		ep = components.Endpoint(o.runDir, name)
	}
	p, err := socket.PathFromEndpoint(ep)
	if err != nil {
		return "", badUsage(err)
	}
	if err := socket.CheckPath(p); err != nil {
		return "", badUsage(err)
	}
	return socket.Endpoint(p), nil
}

func newGetCmd(stdout, stderr io.Writer) *cobra.Command {
	o := &getOpts{}
	cmd := &cobra.Command{
		Use:   "get pods|node",
		Short: "show the node's pods (podconfig + statusd) or its Node (nodestatusd)",
		Args:  func(*cobra.Command, []string) error { return nil },
		RunE: func(*cobra.Command, []string) error {
			return badUsage(errors.New("get: say what to get: pods or node"))
		},
	}
	f := cmd.PersistentFlags()
	addRunDir(f, &o.runDir)
	f.StringVarP(&o.output, "output", "o", "", "output format: empty for a table, json, or yaml (node only)")
	f.DurationVar(&o.timeout, "timeout", 10*time.Second, "how long to wait for an answer (not the watch)")
	f.StringVar(&o.podconfig, "podconfig-endpoint", "", "podconfig endpoint (default unix://<run-dir>/podconfig.sock)")
	f.StringVar(&o.statusd, "statusd-endpoint", "", "statusd endpoint (default unix://<run-dir>/statusd.sock)")
	f.StringVar(&o.nodestatus, "nodestatusd-endpoint", "", "nodestatusd endpoint (default unix://<run-dir>/nodestatusd.sock)")
	cmd.AddCommand(newGetPodsCmd(o, stdout, stderr), newGetNodeCmd(o, stdout))
	return cmd
}

// rpcError turns a failed call into one line saying which service and what to do.
func rpcError(svc, method, ep string, err error) error {
	switch status.Code(err) {
	case codes.Unimplemented:
		return failure("%s does not implement %s yet (Unimplemented)", svc, method)
	case codes.Unavailable, codes.DeadlineExceeded:
		return failure("%s is not answering on %s; is microlet running? (see `microlet status`)", svc, ep)
	default:
		return failure("%s %s: %s", svc, method, status.Convert(err).Message())
	}
}

// podRow is a pod joined with its cached status.
type podRow struct {
	pod    *corev1.Pod
	source string
}

func newGetPodsCmd(o *getOpts, stdout, stderr io.Writer) *cobra.Command {
	var watch bool
	cmd := &cobra.Command{
		Use:     "pods",
		Aliases: []string{"pod", "po"},
		Short:   "list the desired pods with their phase, readiness and restarts",
		Args:    argsExactly(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.output != "" && o.output != "json" {
				return badUsage(fmt.Errorf("--output %q: want json or nothing for a table", o.output))
			}
			pcEP, err := o.endpoint(o.podconfig, components.PodConfig)
			if err != nil {
				return err
			}
			sdEP, err := o.endpoint(o.statusd, components.Statusd)
			if err != nil {
				return err
			}
			pcc, err := grpcclient.Dial(pcEP)
			if err != nil {
				return failure("%v", err)
			}
			defer func() { _ = pcc.Close() }()
			sdc, err := grpcclient.Dial(sdEP)
			if err != nil {
				return failure("%v", err)
			}
			defer func() { _ = sdc.Close() }()
			pc := podconfigv1.NewPodConfigServiceClient(pcc)
			sd := statusdv1.NewStatusServiceClient(sdc)
			if watch {
				return watchPods(cmd.Context(), o, pc, sd, pcEP, stdout, stderr)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), o.timeout)
			defer cancel()
			resp, err := pc.ListPods(ctx, &podconfigv1.ListPodsRequest{})
			if err != nil {
				return rpcError("podconfig", "ListPods", pcEP, err)
			}
			rows := make([]podRow, 0, len(resp.GetPods()))
			for _, s := range resp.GetPods() {
				rows = append(rows, podRow{pod: decodePod(s), source: s.GetSource()})
			}
			joinStatuses(ctx, sd, rows, stderr)
			if o.output == "json" {
				return printPodsJSON(stdout, rows)
			}
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			printPodHeader(tw)
			for _, r := range rows {
				printPodRow(tw, r)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "after the list, print each change as podconfig reports it")
	return cmd
}

// decodePod rebuilds the Pod of a summary; a summary without the object still
// yields its identity.
func decodePod(s *podconfigv1.PodSummary) *corev1.Pod {
	pod := &corev1.Pod{}
	if len(s.GetPod()) > 0 {
		if err := pod.Unmarshal(s.GetPod()); err != nil {
			pod = &corev1.Pod{}
		}
	}
	if pod.Name == "" {
		pod.Name = s.GetName()
	}
	if pod.Namespace == "" {
		pod.Namespace = s.GetNamespace()
	}
	if pod.UID == "" {
		pod.UID = types.UID(s.GetUid())
	}
	return pod
}

// joinStatuses replaces each pod's status with statusd's, when statusd answers.
func joinStatuses(ctx context.Context, sd statusdv1.StatusServiceClient, rows []podRow, stderr io.Writer) {
	if len(rows) == 0 {
		return
	}
	resp, err := sd.ListPodStatuses(ctx, &statusdv1.ListPodStatusesRequest{})
	if err != nil {
		fmt.Fprintf(stderr, "statuses from statusd unavailable (%s); showing podconfig's view\n", status.Code(err))
		return
	}
	byUID := map[string]*statusdv1.PodStatusEntry{}
	for _, e := range resp.GetEntries() {
		byUID[e.GetPodUid()] = e
	}
	for _, r := range rows {
		e, ok := byUID[string(r.pod.UID)]
		if !ok || len(e.GetStatus()) == 0 {
			continue
		}
		st := corev1.PodStatus{}
		if err := st.Unmarshal(e.GetStatus()); err == nil {
			r.pod.Status = st
		}
	}
}

func printPodHeader(w io.Writer) {
	fmt.Fprintln(w, "NAMESPACE\tNAME\tUID\tSOURCE\tPHASE\tREADY\tRESTARTS\tAGE")
}

func printPodRow(w io.Writer, r podRow) {
	p := r.pod
	ready, restarts := 0, int32(0)
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Ready {
			ready++
		}
		restarts += cs.RestartCount
	}
	total := len(p.Spec.Containers)
	phase := string(p.Status.Phase)
	if phase == "" {
		phase = "-"
	}
	fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d/%d\t%d\t%s\n", p.Namespace, p.Name, p.UID, orDash(r.source), phase, ready, total, restarts, podAge(p))
}

func podAge(p *corev1.Pod) string {
	var t metav1.Time
	switch {
	case p.Status.StartTime != nil:
		t = *p.Status.StartTime
	case !p.CreationTimestamp.IsZero():
		t = p.CreationTimestamp
	default:
		return "<unknown>"
	}
	return duration.HumanDuration(time.Since(t.Time))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func printPodsJSON(w io.Writer, rows []podRow) error {
	list := corev1.PodList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "List"}, Items: []corev1.Pod{}}
	for _, r := range rows {
		p := r.pod.DeepCopy()
		p.APIVersion, p.Kind = "v1", "Pod"
		list.Items = append(list.Items, *p)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(list)
}

// watchEvent is one line of `get pods --watch -o json`, shaped like a
// Kubernetes watch event.
type watchEvent struct {
	Type   string      `json:"type"`
	Source string      `json:"source,omitempty"`
	Object *corev1.Pod `json:"object"`
}

// watchPods follows podconfig's Watch: the opening snapshot is printed as a
// table, then every changed pod as a row (or one JSON event per line).
func watchPods(ctx context.Context, o *getOpts, pc podconfigv1.PodConfigServiceClient, sd statusdv1.StatusServiceClient, ep string, stdout, stderr io.Writer) error {
	stream, err := pc.Watch(ctx, &podconfigv1.WatchRequest{}, grpc.WaitForReady(false))
	if err != nil {
		return rpcError("podconfig", "Watch", ep, err)
	}
	// known is the client's view: source -> uid -> pod.
	var known map[string]map[string]*corev1.Pod
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	header := false
	for {
		resp, err := stream.Recv()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return rpcError("podconfig", "Watch", ep, err)
		}
		var changes []podChange
		changes, known = applyWatch(known, resp, stderr)
		sort.SliceStable(changes, func(i, j int) bool {
			a, b := changes[i].Pod, changes[j].Pod
			return a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name
		})
		rows := make([]podRow, len(changes))
		for i, c := range changes {
			rows[i] = podRow{pod: c.Pod.DeepCopy(), source: c.Source}
		}
		jctx, cancel := context.WithTimeout(ctx, o.timeout)
		joinStatuses(jctx, sd, rows, io.Discard)
		cancel()
		for i, c := range changes {
			if o.output == "json" {
				b, err := json.Marshal(watchEvent{Type: c.Type, Source: c.Source, Object: rows[i].pod})
				if err != nil {
					return failure("%v", err)
				}
				if _, err := fmt.Fprintf(stdout, "%s\n", b); err != nil {
					return nil
				}
				continue
			}
			if !header {
				printPodHeader(tw)
				header = true
			}
			if c.Type == "DELETED" {
				rows[i].pod.Status.Phase = "Deleted"
			}
			printPodRow(tw, rows[i])
		}
		if err := tw.Flush(); err != nil {
			return nil
		}
	}
}

func newGetNodeCmd(o *getOpts, stdout io.Writer) *cobra.Command {
	var nodeName string
	cmd := &cobra.Command{
		Use:     "node",
		Aliases: []string{"nodes", "no"},
		Short:   "show the Node as nodestatusd keeps it",
		Args:    argsExactly(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch o.output {
			case "", "json", "yaml":
			default:
				return badUsage(fmt.Errorf("--output %q: want json, yaml or nothing for a table", o.output))
			}
			ep, err := o.endpoint(o.nodestatus, components.NodeStatusd)
			if err != nil {
				return err
			}
			cc, err := grpcclient.Dial(ep)
			if err != nil {
				return failure("%v", err)
			}
			defer func() { _ = cc.Close() }()
			ctx, cancel := context.WithTimeout(cmd.Context(), o.timeout)
			defer cancel()
			resp, err := nodestatusv1.NewNodeStatusServiceClient(cc).GetNode(ctx, &nodestatusv1.GetNodeRequest{NodeName: nodeName})
			if err != nil {
				return rpcError("nodestatusd", "GetNode", ep, err)
			}
			node := &corev1.Node{}
			if err := node.Unmarshal(resp.GetNode()); err != nil {
				return failure("nodestatusd sent an undecodable Node: %v", err)
			}
			node.APIVersion, node.Kind = "v1", "Node"
			switch o.output {
			case "json":
				enc := json.NewEncoder(stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(node)
			case "yaml":
				b, err := yaml.Marshal(node)
				if err != nil {
					return failure("%v", err)
				}
				_, err = stdout.Write(b)
				return err
			}
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSTATUS\tAGE\tVERSION\tINTERNAL-IP\tOS-IMAGE\tCONTAINER-RUNTIME")
			age := "<unknown>"
			if !node.CreationTimestamp.IsZero() {
				age = duration.HumanDuration(time.Since(node.CreationTimestamp.Time))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", node.Name, nodeReady(node), age,
				orDash(node.Status.NodeInfo.KubeletVersion), orDash(nodeAddress(node, corev1.NodeInternalIP)),
				orDash(node.Status.NodeInfo.OSImage), orDash(node.Status.NodeInfo.ContainerRuntimeVersion))
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&nodeName, "node-name", "", "a simulated node's name; empty for the real node")
	return cmd
}

// nodeReady is get node's STATUS column: the Ready condition's status,
// plus SchedulingDisabled for a cordoned node.
func nodeReady(n *corev1.Node) string {
	st := "Unknown"
	if _, c := nodeutil.GetNodeCondition(&n.Status, corev1.NodeReady); c != nil {
		switch c.Status {
		case corev1.ConditionTrue:
			st = "Ready"
		case corev1.ConditionFalse:
			st = "NotReady"
		}
	}
	if n.Spec.Unschedulable {
		st += ",SchedulingDisabled"
	}
	return st
}

func nodeAddress(n *corev1.Node, t corev1.NodeAddressType) string {
	var out []string
	for _, a := range n.Status.Addresses {
		if a.Type == t {
			out = append(out, a.Address)
		}
	}
	return strings.Join(out, ",")
}

// podChange is one pod as a watch event: ADDED, MODIFIED or DELETED.
type podChange struct {
	Type   string
	Source string
	Pod    *corev1.Pod
}

// applyWatch folds one Watch response into known (source -> uid -> pod) and
// returns what changed. A resync replaces the whole view; SET replaces one
// source's pods, so pods missing from it are DELETED.
func applyWatch(known map[string]map[string]*corev1.Pod, resp *podconfigv1.WatchResponse, stderr io.Writer) ([]podChange, map[string]map[string]*corev1.Pod) {
	var before map[string]map[string]*corev1.Pod
	if known == nil || resp.GetResync() {
		before, known = known, map[string]map[string]*corev1.Pod{}
	}
	var changes []podChange
	for _, u := range resp.GetUpdates() {
		src := u.GetSource()
		if known[src] == nil {
			known[src] = map[string]*corev1.Pod{}
		}
		pods := make([]*corev1.Pod, 0, len(u.GetPods()))
		for _, b := range u.GetPods() {
			p := &corev1.Pod{}
			if err := p.Unmarshal(b); err != nil {
				fmt.Fprintf(stderr, "skipping an undecodable pod from %s: %v\n", src, err)
				continue
			}
			pods = append(pods, p)
		}
		switch u.GetOp() {
		case podconfigv1.Operation_OPERATION_SET:
			keep := map[string]bool{}
			for _, p := range pods {
				keep[string(p.UID)] = true
				typ := "MODIFIED"
				if _, ok := known[src][string(p.UID)]; !ok {
					typ = "ADDED"
				}
				known[src][string(p.UID)] = p
				changes = append(changes, podChange{typ, src, p})
			}
			for uid, p := range known[src] {
				if !keep[uid] {
					delete(known[src], uid)
					changes = append(changes, podChange{"DELETED", src, p})
				}
			}
		case podconfigv1.Operation_OPERATION_REMOVE:
			for _, p := range pods {
				delete(known[src], string(p.UID))
				changes = append(changes, podChange{"DELETED", src, p})
			}
		case podconfigv1.Operation_OPERATION_ADD:
			for _, p := range pods {
				known[src][string(p.UID)] = p
				changes = append(changes, podChange{"ADDED", src, p})
			}
		default:
			for _, p := range pods {
				known[src][string(p.UID)] = p
				changes = append(changes, podChange{"MODIFIED", src, p})
			}
		}
	}
	// After a resync, what the client knew before is compared with the new
	// snapshot: known pods are MODIFIED, not ADDED, and the missing ones DELETED.
	for src, pods := range before {
		for uid, p := range pods {
			if _, ok := known[src][uid]; !ok {
				changes = append(changes, podChange{"DELETED", src, p})
			}
		}
	}
	for i, c := range changes {
		if _, ok := before[c.Source][string(c.Pod.UID)]; ok && c.Type == "ADDED" {
			changes[i].Type = "MODIFIED"
		}
	}
	return changes, known
}
