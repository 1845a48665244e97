package podstatus

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// nowFunc stamps transitions made while merging; a variable so tests can pin it.
var nowFunc = func() metav1.Time { return metav1.Now().Rfc3339Copy() }
