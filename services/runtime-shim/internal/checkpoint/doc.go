// Package checkpoint keeps one small JSON file per pod sandbox in the
// runtime-shim's data dir. Docker only knows containers; the checkpoint keeps
// what the CRI was told (metadata, labels, annotations, port mappings) so that
// StopPodSandbox, RemovePodSandbox and ListPodSandbox still work after Docker
// lost the pause container or the shim restarted. A checkpoint that does not
// decode is moved aside (internal/statefile) and treated as absent.
//
//	s, _ := checkpoint.NewStore(dir, log)
//	_ = s.Put(checkpoint.Sandbox{ID: id, Name: "k8s_POD_..."})
//	sb, err := s.Get(id)   // errors.Is(err, checkpoint.ErrNotFound) when absent
//	_ = s.Delete(id)
package checkpoint
