package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"

	"github.com/microlet/microlet/internal/testenv"
	nodestatusv1 "github.com/microlet/microlet/proto/microlet/nodestatus/v1"
)

func reportCondition(t *testing.T, r *rig, reporter string, conds ...corev1.NodeCondition) {
	t.Helper()
	req := &nodestatusv1.ReportNodeConditionsRequest{Reporter: reporter}
	for _, c := range conds {
		b, err := c.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		req.Conditions = append(req.Conditions, b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := r.client.ReportNodeConditions(ctx, req); err != nil {
		t.Fatal(err)
	}
}

// TestReportReadyErrors: over the API, a reporter's error holds the Node
// NotReady with the kubelet's shutdown message and clearing it restores
// Ready; an empty reporter is InvalidArgument.
func TestReportReadyErrors(t *testing.T) {
	r := startRig(t, rigOpts{node: "ready-errors", noCloud: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	waitReady := func(want corev1.ConditionStatus, msg string) {
		t.Helper()
		testenv.Eventually(t, fmt.Sprintf("Ready %s %q", want, msg), time.Minute, func() error {
			c := condition(r.getNode(""), corev1.NodeReady)
			if c != nil && c.Status == want && (msg == "" || c.Message == msg) {
				return nil
			}
			return fmt.Errorf("Ready is %+v", c)
		})
	}
	waitReady(corev1.ConditionTrue, "")
	if _, err := r.client.ReportReadyErrors(ctx, &nodestatusv1.ReportReadyErrorsRequest{Reporter: "podsyncd/nodeshutdown", Errors: []string{"node is shutting down"}}); err != nil {
		t.Fatal(err)
	}
	waitReady(corev1.ConditionFalse, "node is shutting down")
	if _, err := r.client.ReportReadyErrors(ctx, &nodestatusv1.ReportReadyErrorsRequest{Reporter: "podsyncd/nodeshutdown"}); err != nil {
		t.Fatal(err)
	}
	waitReady(corev1.ConditionTrue, "")
	if _, err := r.client.ReportReadyErrors(ctx, &nodestatusv1.ReportReadyErrorsRequest{Errors: []string{"x"}}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("empty reporter: %v", err)
	}
}
