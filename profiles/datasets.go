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
	names := make([]string, 0, len(s.Datasets))
	for n := range s.Datasets {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// loadDatasets reads datasets/*.yaml under dir (none when the dir is
// absent). Each names an existing absolute directory that is not a system
// directory, and at least one tenant.
func loadDatasets(dir string) (map[string]*Dataset, error) {
	dsDir := filepath.Join(dir, "datasets")
	out := map[string]*Dataset{}
	entries, err := os.ReadDir(dsDir)
	if errors.Is(err, os.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, &Error{File: dsDir, Msg: fmt.Sprintf("cannot read the datasets dir: %v", unwrapPath(err))}
	}
	files, err := readYAMLFiles(dsDir, entries, "datasets", "dataset")
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		file, data := f.path, f.data
		ds, err := parseDataset(file, data)
		if err != nil {
			return nil, err
		}
		out[ds.Name] = ds
	}
	return out, nil
}

// systemDirs may not be datasets (nor contain one... only be one: a
// dataset under /etc is refused by the prefix check below).
var systemDirs = []string{"/", "/bin", "/boot", "/dev", "/etc", "/lib", "/lib64", "/proc", "/root", "/run", "/sbin", "/sys", "/usr", "/var/run", "/var/lib/docker"}

func parseDataset(file string, data []byte) (*Dataset, error) {
	root, err := parseDocument(file, data)
	if err != nil {
		return nil, err
	}
	d := &decoder{file: file, lines: make(map[string]int)}
	var ds Dataset
	if err := d.decodeStruct(root, reflect.ValueOf(&ds).Elem(), ""); err != nil {
		return nil, err
	}
	base := strings.TrimSuffix(filepath.Base(file), ".yaml")
	switch {
	case ds.Name == "":
		return nil, d.errf(0, "name is required; set name: %s (the file name without .yaml)", base)
	case ds.Name != base:
		return nil, d.errf(d.lines["name"], "name %q does not match the file name %q; rename the file to %s.yaml or set name: %s", ds.Name, filepath.Base(file), ds.Name, base)
	case !nameRe.MatchString(ds.Name):
		return nil, d.errf(d.lines["name"], "name %q is not allowed; use 1 to 63 lowercase letters, digits and '-'", ds.Name)
	}
	if ds.Path == "" || !filepath.IsAbs(ds.Path) {
		return nil, d.errf(d.lines["path"], "path %q must be an absolute directory on the host", ds.Path)
	}
	clean := filepath.Clean(ds.Path)
	for _, sys := range systemDirs {
		if clean == sys || sys != "/" && strings.HasPrefix(clean, sys+"/") {
			return nil, d.errf(d.lines["path"], "path %s is (under) the system directory %s; put datasets in a directory of their own", clean, sys)
		}
	}
	st, err := os.Stat(clean)
	if err != nil || !st.IsDir() {
		return nil, d.errf(d.lines["path"], "path %s is not an existing directory", clean)
	}
	ds.Path = clean
	if len(ds.Tenants) == 0 {
		return nil, d.errf(d.lines["tenants"], "tenants is required: list the tenants that may mount the dataset")
	}
	for i, t := range ds.Tenants {
		if !tenantRe.MatchString(t) {
			return nil, d.errf(d.lines[fmt.Sprintf("tenants[%d]", i)], "tenants[%d] %q is not a tenant name", i, t)
		}
	}
	ds.Source = file
	return &ds, nil
}
