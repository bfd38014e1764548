package desired

import (
	"reflect"
	"testing"

	"github.com/sosappliance/sosappliance/appliance/config"
)

// TestCompileCluster: each controller node gets its own listen address,
// every node (agents too) gets the cluster, and the cluster knows every
// node it should hear from.
func TestCompileCluster(t *testing.T) {
	cfg, _, diags := config.LoadFile("../../examples/cluster.hcl")
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	for node, listen := range map[string]string{"ctl-east": "192.0.2.1:6653", "ctl-west": "192.0.2.129:6653"} {
		d, err := Compile(cfg, node)
		if err != nil {
			t.Fatal(err)
		}
		if d.Controller == nil || d.Controller.Listen != listen || len(d.Controller.Switches) != 2 {
			t.Errorf("%s: controller %+v", node, d.Controller)
		}
	}
	d, err := Compile(cfg, "agent-east")
	if err != nil {
		t.Fatal(err)
	}
	if d.Controller != nil || d.Cluster == nil {
		t.Fatalf("agent: controller %v, cluster %v", d.Controller, d.Cluster)
	}
	if want := []string{"agent-east", "agent-west", "ctl-east", "ctl-west"}; !reflect.DeepEqual(d.Cluster.Nodes, want) {
		t.Errorf("nodes %v, want %v", d.Cluster.Nodes, want)
	}
	if want := []string{"ctl-east", "ctl-west"}; !reflect.DeepEqual(d.Cluster.Controllers, want) {
		t.Errorf("controllers %v", d.Cluster.Controllers)
	}
	if d.Cluster.LeaseTTL.Seconds() != 5 || len(d.Cluster.Endpoints) != 3 {
		t.Errorf("cluster %+v", d.Cluster)
	}
	if d, _ := Compile(loadExample(t), "ctl-clemson"); d.Cluster != nil {
		t.Errorf("no cluster block, cluster %+v", d.Cluster)
	}
}
