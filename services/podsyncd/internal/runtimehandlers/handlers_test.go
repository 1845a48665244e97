package runtimehandlers

import (
	"context"
	"errors"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

type fakeStatus struct {
	resp *runtimeapi.StatusResponse
	err  error
}

func (f *fakeStatus) Status(context.Context, bool) (*runtimeapi.StatusResponse, error) {
	return f.resp, f.err
}

func status(ready bool, handlers ...*runtimeapi.RuntimeHandler) *runtimeapi.StatusResponse {
	return &runtimeapi.StatusResponse{
		Status:          &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{{Type: runtimeapi.RuntimeReady, Status: ready}}},
		RuntimeHandlers: handlers,
	}
}

func handler(name string, rro bool) *runtimeapi.RuntimeHandler {
	return &runtimeapi.RuntimeHandler{Name: name, Features: &runtimeapi.RuntimeHandlerFeatures{RecursiveReadOnlyMounts: rro}}
}

// TestRecursiveReadOnlySupport follows the kubelet's runtime state: a
// ready runtime's list is taken, a runtime that is down or not ready keeps
// the last list, and only the default handler counts.
func TestRecursiveReadOnlySupport(t *testing.T) {
	f := &fakeStatus{}
	h := New(f, nil)
	ctx := context.Background()
	steps := []struct {
		name    string
		resp    *runtimeapi.StatusResponse
		err     error
		wantErr bool
		want    bool
	}{
		{name: "nothing read yet", want: false, err: errors.New("down"), wantErr: true},
		{name: "ready, default handler supports it", resp: status(true, handler("", true), handler("kata", false)), want: true},
		{name: "down: the last list stays", err: errors.New("down"), wantErr: true, want: true},
		{name: "not ready: the last list stays", resp: status(false, handler("", false)), wantErr: true, want: true},
		{name: "ready, default handler does not", resp: status(true, handler("", false)), want: false},
		{name: "only another handler supports it", resp: status(true, handler("kata", true)), want: false},
		{name: "no handlers listed", resp: status(true), want: false},
		{name: "default handler without features", resp: status(true, &runtimeapi.RuntimeHandler{}), want: false},
	}
	for _, s := range steps {
		f.resp, f.err = s.resp, s.err
		if err := h.Refresh(ctx); (err != nil) != s.wantErr {
			t.Errorf("%s: Refresh = %v, want error %v", s.name, err, s.wantErr)
		}
		if got := h.SupportsRecursiveReadOnlyMounts(""); got != s.want {
			t.Errorf("%s: SupportsRecursiveReadOnlyMounts = %v, want %v", s.name, got, s.want)
		}
	}
}
