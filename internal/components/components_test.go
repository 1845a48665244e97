package components

import "testing"

// TestStartOrder checks that All lists every dependency before its dependent,
// which is what the supervisor relies on.
func TestStartOrder(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range All {
		for _, n := range c.Needs {
			if !seen[n] {
				t.Errorf("%s needs %s, which comes later or not at all", c.Name, n)
			}
		}
		seen[c.Name] = true
	}
}

// TestCallsAreComponents checks that Calls names only listed services, and
// none that is already in Needs.
func TestCallsAreComponents(t *testing.T) {
	for _, c := range All {
		for _, n := range c.Calls {
			if _, err := Get(n); err != nil || n == Supervisor {
				t.Errorf("%s calls %q, which is not a service", c.Name, n)
			}
			for _, need := range c.Needs {
				if need == n {
					t.Errorf("%s lists %s in both Needs and Calls", c.Name, n)
				}
			}
		}
	}
}
