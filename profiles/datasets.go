package profiles

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"github.com/sandboxd/sandboxd/internal/yamlfile"
)

// Dataset is a directory on the host that execs may mount read-only at
// /data/<name>, declared by operators in datasets/<name>.yaml:
//
//	name: sales-2024
//	description: Quarterly sales exports.
//	path: /srv/datasets/sales-2024
//	tenants: [acme]
type Dataset struct {
	Name        string `yaml:"name"`
	Description string `yaml:"description"`
	// Path is an absolute directory on the host (the Docker engine's host).
	Path string `yaml:"path"`
	// Tenants may mount the dataset; others get 403.
	Tenants []string `yaml:"tenants"`
	// Source is the file the dataset was declared in. Set by the loader.
	Source string `yaml:"-"`
}

// Allows reports whether tenant may mount the dataset.
func (d *Dataset) Allows(tenant string) bool { return slices.Contains(d.Tenants, tenant) }

var tenantRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$`)

// DatasetNames returns the dataset names, sorted.
func (s *Set) DatasetNames() []string {
	return sortedNames(s.Datasets)
}

// loadDatasets reads datasets/*.yaml under dir (none when the dir is
// absent). Each names an existing absolute directory that is not a system
// directory, and at least one tenant. It returns the datasets that loaded
// and every problem.
func loadDatasets(dir string) (map[string]*Dataset, Errors) {
	dsDir := filepath.Join(dir, "datasets")
	out := map[string]*Dataset{}
	entries, err := os.ReadDir(dsDir)
	if errors.Is(err, os.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return out, Errors{{File: dsDir, Msg: fmt.Sprintf("cannot read the datasets dir: %v", yamlfile.StripPath(err))}}
	}
	var errs Errors
	for _, f := range readYAMLFiles(dsDir, entries, "datasets", "dataset") {
		if f.err != nil {
			errs = append(errs, f.err)
			continue
		}
		ds, ferrs := parseDataset(f.path, f.data)
		if len(ferrs) > 0 {
			errs = append(errs, ferrs...)
			continue
		}
		out[ds.Name] = ds
	}
	return out, errs
}

// systemDirs may not be datasets, nor hold one.
var systemDirs = []string{"/", "/bin", "/boot", "/dev", "/etc", "/lib", "/lib64", "/proc", "/root", "/run", "/sbin", "/sys", "/usr", "/var/run", "/var/lib/docker"}

// parseDataset decodes and validates one dataset, and returns every
// problem it has.
func parseDataset(file string, data []byte) (*Dataset, Errors) {
	root, err := parseDocument(file, data)
	if err != nil {
		return nil, asErrors(err)
	}
	d := newDecoder(file, nil)
	var ds Dataset
	d.decodeStruct(root, reflect.ValueOf(&ds).Elem(), "")
	base := strings.TrimSuffix(filepath.Base(file), ".yaml")
	switch {
	case ds.Name == "":
		d.problem("name", "name is required; set name: %s (the file name without .yaml)", base)
	case ds.Name != base:
		d.problem("name", "name %q does not match the file name %q; rename the file to %s.yaml or set name: %s", ds.Name, filepath.Base(file), ds.Name, base)
	case !nameRe.MatchString(ds.Name):
		d.problem("name", "name %q is not allowed; use 1 to 63 lowercase letters, digits and '-'", ds.Name)
	}
	if p, ok := checkDatasetPath(ds.Path); !ok {
		d.problem("path", "%s", p)
	} else {
		ds.Path = p
	}
	if len(ds.Tenants) == 0 {
		d.problem("tenants", "tenants is required: list the tenants that may mount the dataset")
	}
	for i, t := range ds.Tenants {
		if !tenantRe.MatchString(t) {
			d.problem(fmt.Sprintf("tenants[%d]", i), "tenants[%d] %q is not a tenant name", i, t)
		}
	}
	if len(d.errs) > 0 {
		sortByPosition(d.errs)
		return nil, d.errs
	}
	ds.Source = file
	return &ds, nil
}

// checkDatasetPath returns the cleaned path of a dataset, or what is
// wrong with it.
func checkDatasetPath(path string) (string, bool) {
	if path == "" || !filepath.IsAbs(path) {
		return fmt.Sprintf("path %q must be an absolute directory on the host", path), false
	}
	clean := filepath.Clean(path)
	for _, sys := range systemDirs {
		if clean == sys || sys != "/" && strings.HasPrefix(clean, sys+"/") {
			return fmt.Sprintf("path %s is (under) the system directory %s; put datasets in a directory of their own", clean, sys), false
		}
	}
	if st, err := os.Stat(clean); err != nil || !st.IsDir() {
		return fmt.Sprintf("path %s is not an existing directory", clean), false
	}
	return clean, true
}
