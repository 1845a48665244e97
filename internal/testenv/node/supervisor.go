package node

import (
	"context"

	supervisorv1 "github.com/microlet/microlet/proto/microlet/supervisor/v1"
)

// Components is the supervisor's view of the node's services, by name
// (each with its process ID, 0 while it is being started again, and its
// restart count), asked through sup.
func Components(ctx context.Context, sup supervisorv1.SupervisorServiceClient) (map[string]*supervisorv1.Component, error) {
	resp, err := sup.ListComponents(ctx, &supervisorv1.ListComponentsRequest{})
	if err != nil {
		return nil, err
	}
	out := make(map[string]*supervisorv1.Component, len(resp.GetComponents()))
	for _, c := range resp.GetComponents() {
		out[c.GetName()] = c
	}
	return out, nil
}
