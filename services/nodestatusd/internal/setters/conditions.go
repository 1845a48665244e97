package setters

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// OwnConditions are the condition types nodestatusd itself computes; other
// reporters may not claim them.
var OwnConditions = map[corev1.NodeConditionType]bool{
	corev1.NodeReady:          true,
	corev1.NodeMemoryPressure: true,
	corev1.NodeDiskPressure:   true,
	corev1.NodePIDPressure:    true,
}

// Conditions holds node conditions reported by other components (a node
// problem detector, a network plug-in). Each reporter owns the types it
// reports; a later report replaces its earlier one, and types it stops
// reporting are removed from the Node. Conditions nobody reported here are
// never touched, so other writers of the Node keep theirs.
type Conditions struct {
	mu      sync.Mutex
	byRep   map[string][]corev1.NodeCondition
	owner   map[corev1.NodeConditionType]string
	dropped map[corev1.NodeConditionType]bool
	changed func()
}

// NewConditions returns an empty store; onChange (may be nil) is called after
// every accepted report so the status is pushed without waiting a period.
func NewConditions(onChange func()) *Conditions {
	return &Conditions{
		byRep:   map[string][]corev1.NodeCondition{},
		owner:   map[corev1.NodeConditionType]string{},
		dropped: map[corev1.NodeConditionType]bool{},
		changed: onChange,
	}
}

// Report replaces reporter's conditions. It refuses an empty reporter, a
// type nodestatusd owns, a type another reporter owns, a duplicate type and
// a status other than True/False/Unknown, naming the offending field.
func (c *Conditions) Report(reporter string, conds []corev1.NodeCondition) error {
	if reporter == "" {
		return fmt.Errorf("reporter: must not be empty")
	}
	seen := map[corev1.NodeConditionType]bool{}
	for i, cond := range conds {
		switch {
		case cond.Type == "":
			return fmt.Errorf("conditions[%d].type: must not be empty", i)
		case OwnConditions[cond.Type]:
			return fmt.Errorf("conditions[%d].type: %s is computed by nodestatusd", i, cond.Type)
		case seen[cond.Type]:
			return fmt.Errorf("conditions[%d].type: %s given twice", i, cond.Type)
		}
		switch cond.Status {
		case corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionUnknown:
		default:
			return fmt.Errorf("conditions[%d].status: %q is not True, False or Unknown", i, cond.Status)
		}
		seen[cond.Type] = true
	}
	c.mu.Lock()
	for t := range seen {
		if o, ok := c.owner[t]; ok && o != reporter {
			c.mu.Unlock()
			return fmt.Errorf("conditions: type %s is owned by reporter %q", t, o)
		}
	}
	for _, old := range c.byRep[reporter] {
		if !seen[old.Type] {
			delete(c.owner, old.Type)
			c.dropped[old.Type] = true
		}
	}
	for t := range seen {
		c.owner[t] = reporter
		delete(c.dropped, t)
	}
	if len(conds) == 0 {
		delete(c.byRep, reporter)
	} else {
		c.byRep[reporter] = append([]corev1.NodeCondition(nil), conds...)
	}
	cb := c.changed
	c.mu.Unlock()
	if cb != nil {
		cb()
	}
	return nil
}

// Setter merges the reported conditions into a Node: reported types are
// set (transition time kept while the status holds), withdrawn types are
// removed, everything else is left as it is.
func (c *Conditions) Setter(now func() time.Time) Setter {
	return func(_ context.Context, node *corev1.Node) error {
		if c == nil {
			return nil
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if len(c.dropped) > 0 {
			kept := node.Status.Conditions[:0:0]
			for _, cond := range node.Status.Conditions {
				if !c.dropped[cond.Type] {
					kept = append(kept, cond)
				}
			}
			node.Status.Conditions = kept
		}
		reps := make([]string, 0, len(c.byRep))
		for r := range c.byRep {
			reps = append(reps, r)
		}
		sort.Strings(reps)
		t := now()
		for _, r := range reps {
			for _, cond := range c.byRep[r] {
				SetCondition(node, cond, t)
			}
		}
		return nil
	}
}
