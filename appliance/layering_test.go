package appliance

import (
	"bufio"
	"bytes"
	"iter"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

const modulePath = "github.com/sosappliance/sosappliance"

// The pure layers (DESIGN.md section 2) import only leaf vocabulary
// packages; linking the store, the host executors or the relay would let
// I/O creep into code that must give the same output for the same input.
var (
	pureLayers = []string{
		modulePath + "/appliance/config",
		modulePath + "/appliance/desired",
		modulePath + "/appliance/plan",
	}
	impureForPureLayers = []string{
		"go.etcd.io/bbolt",
		"go.etcd.io/etcd",
		"github.com/vishvananda/netlink",
		"github.com/google/nftables",
		modulePath + "/dataplane/relay",
		modulePath + "/tuning",
		modulePath + "/appliance/cluster",
	}
	// leafPackages hold the vocabulary the pure layers share with the
	// executors; they import the standard library and each other only.
	leafPackages = []string{
		modulePath + "/appliance/profiles",
		modulePath + "/host/cpuset",
		modulePath + "/host/item",
		modulePath + "/internal/portrange",
		modulePath + "/sdn/spread",
	}
)

func TestPureLayersLinkNoImpurePackage(t *testing.T) {
	testsupport.RequireBinaries(t, "go")
	for _, pkg := range pureLayers {
		// One error per forbidden package, with a shortest import chain
		// from the pure layer, so the failure says which import to remove.
		found := map[string]bool{}
		for chain := range importChains(listPackages(t, pkg), pkg) {
			if bad := impureRoot(chain[len(chain)-1]); bad != "" && !found[bad] {
				found[bad] = true
				t.Errorf("%s links %s: %s", pkg, bad, strings.Join(chain, " -> "))
			}
		}
	}
}

func TestLeafPackagesImportOnlyTheStandardLibrary(t *testing.T) {
	testsupport.RequireBinaries(t, "go")
	for _, pkg := range leafPackages {
		listed := listPackages(t, pkg)
		for chain := range importChains(listed, pkg) {
			dep := chain[len(chain)-1]
			if !listed[dep].standard && !slices.Contains(leafPackages, dep) {
				t.Errorf("leaf package %s links %s: %s", pkg, dep, strings.Join(chain, " -> "))
			}
		}
	}
}

type listedPackage struct {
	standard bool
	imports  []string
}

// listPackages runs go list -deps for pkg and returns every package it
// links, pkg included.
func listPackages(t *testing.T, pkg string) map[string]listedPackage {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-f", `{{.ImportPath}} {{.Standard}}{{range .Imports}} {{.}}{{end}}`, pkg)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, stderr.Bytes())
	}
	listed := map[string]listedPackage{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 2 {
			listed[f[0]] = listedPackage{standard: f[1] == "true", imports: f[2:]}
		}
	}
	if _, ok := listed[pkg]; !ok {
		t.Fatalf("go list -deps %s does not list %s itself:\n%s", pkg, pkg, out)
	}
	return listed
}

// impureRoot is the forbidden package that dep is or lies under, or "".
func impureRoot(dep string) string {
	for _, bad := range impureForPureLayers {
		if dep == bad || strings.HasPrefix(dep, bad+"/") {
			return bad
		}
	}
	return ""
}

// importChains yields, breadth first, a shortest import chain from
// package from to every package it links.
func importChains(listed map[string]listedPackage, from string) iter.Seq[[]string] {
	return func(yield func([]string) bool) {
		prev := map[string]string{from: ""}
		queue := []string{from}
		for len(queue) > 0 {
			p := queue[0]
			queue = queue[1:]
			var chain []string
			for q := p; q != ""; q = prev[q] {
				chain = append(chain, q)
			}
			slices.Reverse(chain)
			if !yield(chain) {
				return
			}
			for _, next := range listed[p].imports {
				if _, seen := prev[next]; !seen {
					prev[next] = p
					queue = append(queue, next)
				}
			}
		}
	}
}
