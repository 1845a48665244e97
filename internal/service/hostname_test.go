package service

import (
	"errors"
	"strings"
	"testing"
)

// TestHostname: the default node name is the host name trimmed and
// lower-cased; an empty name or a failing lookup is an error saying so.
func TestHostname(t *testing.T) {
	for _, tc := range []struct {
		name, host string
		err        error
		want       string
		wantErr    string
	}{
		{name: "plain", host: "node-1", want: "node-1"},
		{name: "upper case and spaces", host: "  Node-A.Example.COM\n", want: "node-a.example.com"},
		{name: "empty", host: " \t", wantErr: "host name is empty"},
		{name: "lookup fails", err: errors.New("uname broke"), wantErr: "host name: uname broke"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := hostname(func() (string, error) { return tc.host, tc.err })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("hostname() = %q, %v; want an error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("hostname() = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
