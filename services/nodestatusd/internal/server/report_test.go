package server

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

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
