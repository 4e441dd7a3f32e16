package httpapi

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/runner"
)

// maxDatasets bounds the datasets one exec mounts.
const maxDatasets = 8

// attachDatasets checks the datasets an exec names (each declared, each
// allowed to the key's tenant: 403 otherwise), takes their snapshot ids
// and adds their mounts to spec.
func (s *Server) attachDatasets(spec *runner.Spec, names []string, key *auth.Key) ([]api.DatasetRef, error) {
	if len(names) == 0 {
		return nil, nil
	}
	if len(names) > maxDatasets {
		return nil, validation("datasets", "%d datasets named; at most %d may be mounted", len(names), maxDatasets)
	}
	set := s.profiles()
	var refs []api.DatasetRef
	for i, name := range names {
		if slices.Contains(names[:i], name) {
			return nil, validation("datasets", "dataset %q is named twice", name)
		}
		ds := set.Datasets[name]
		if ds == nil {
			known := set.DatasetNames()
			list := "none are declared"
			if len(known) > 0 {
				list = "declared: " + strings.Join(known, ", ")
			}
			return nil, validation("datasets", "dataset %q does not exist (%s)", name, list)
		}
		if !ds.Allows(key.Tenant) {
			return nil, &api.Error{Status: http.StatusForbidden, Code: api.CodeForbidden, Field: "datasets",
				Message: fmt.Sprintf("tenant %s may not use dataset %q; ask the operator to add it to the dataset's tenants", key.Tenant, name)}
		}
		snap, err := s.snapshots.Snapshot(ds.Path)
		if err != nil {
			s.log.Error("computing a dataset snapshot failed", "dataset", name, "err", err)
			return nil, &api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable, Field: "datasets",
				Message: fmt.Sprintf("dataset %q cannot be read on the host right now; the operator's log says why", name)}
		}
		refs = append(refs, api.DatasetRef{Name: name, Snapshot: snap})
		spec.Datasets = append(spec.Datasets, runner.DatasetMount{Name: name, Path: ds.Path})
	}
	return refs, nil
}
