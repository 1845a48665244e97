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
