package plan

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/host/item"
)

var update = flag.Bool("update", false, "rewrite testdata golden files")

func newItem(kind, key, value string) item.Item {
	return item.Item{Kind: kind, Key: key, Value: value}
}

// from is a desired item with the origin desired gives it.
func from(it item.Item, origin string) item.Item {
	it.Origin = origin
	return it
}

func present(kind, key, value string, warnings ...string) item.Observation {
	return item.Observation{Item: newItem(kind, key, value), Present: true, Warnings: warnings}
}

func absent(kind, key string) item.Observation {
	return item.Observation{Item: newItem(kind, key, "")}
}

// scenario covers every branch of Diff.
func scenario() ([]item.Item, []item.Observation, []Owned) {
	desired := []item.Item{
		from(newItem("sysctl", "net.core.rmem_max", "134217728"), "profile fasterdata-40g (sos.hcl:40)"), // unowned, differs
		newItem("sysctl", "net.ipv4.tcp_mtu_probing", "1"),                                               // unowned, equal: no change
		from(newItem("sysctl", "net.ipv4.tcp_congestion_control", "bbr"), "sos.hcl:43"),                  // owned, drifted
		from(newItem("sysctl", "net.ipv4.tcp_rmem", "4096 87380 67108864"), "sos.hcl:44"),                // owned, config changed
		from(newItem("interface", "eth1/mtu", "9000"), "profile fasterdata-40g (sos.hcl:40)"),            // owned, interrupted, host has it
		newItem("irq", "eth1", "0-3"), // owned, applied, equal: no change
		from(newItem("steering", "nftables", `{"mark":1,"divert":[]}`), "agent agent-clemson"), // unowned, absent
		newItem("steering", "route", "local 0.0.0.0/0 dev lo table 7"),                         // owned, applied, missing
		newItem("steering", "rule", "fwmark 0x1 lookup 7 priority 100"),                        // owned, interrupted, absent
	}
	observed := []item.Observation{
		present("sysctl", "net.core.rmem_max", "212992"),
		present("sysctl", "net.ipv4.tcp_mtu_probing", "1"),
		present("sysctl", "net.ipv4.tcp_congestion_control", "cubic"),
		present("sysctl", "net.ipv4.tcp_rmem", "4096 87380 33554432"),
		present("interface", "eth1/mtu", "9000"),
		present("irq", "eth1", "0-3", "irqbalance is running (pid 7) and will undo the IRQ affinity of eth1"),
		absent("steering", "nftables"),
		absent("steering", "route"),
		absent("steering", "rule"),
		// owned, no longer desired:
		present("sysctl", "net.core.wmem_max", "134217728"), // put back previous
		present("relay", "cpus", "13"),                      // remove (absent before)
		absent("sysctl", "net.ipv4.conf.eth9.rp_filter"),    // gone: forget
		present("interface", "eth1/txqueuelen", "1000"),     // already at previous
	}
	rec := func(kind, key, prev string, prevPresent bool, desired string, applied bool, first, serial uint64) Owned {
		return Owned{Kind: kind, Key: key, Previous: prev, PreviousPresent: prevPresent, Desired: desired, Applied: applied, FirstSerial: first, Serial: serial}
	}
	applied := []Owned{
		rec("sysctl", "net.ipv4.tcp_congestion_control", "cubic", true, "bbr", true, 1, 2),
		rec("sysctl", "net.ipv4.tcp_rmem", "4096 131072 6291456", true, "4096 87380 33554432", true, 1, 2),
		rec("interface", "eth1/mtu", "1500", true, "9000", false, 3, 3),
		rec("irq", "eth1", "45:0-3", true, "0-3", true, 1, 1),
		rec("steering", "route", "", false, "local 0.0.0.0/0 dev lo table 7", true, 1, 1),
		rec("steering", "rule", "", false, "fwmark 0x1 lookup 7 priority 100", false, 3, 3),
		rec("sysctl", "net.core.wmem_max", "212992", true, "134217728", true, 1, 1),
		rec("relay", "cpus", "", false, "13", true, 2, 2),
		rec("sysctl", "net.ipv4.conf.eth9.rp_filter", "1", true, "2", true, 1, 1),
		rec("interface", "eth1/txqueuelen", "1000", true, "10000", true, 1, 2),
	}
	return desired, observed, applied
}

func scenarioPlan() Plan {
	p := Diff(scenario())
	p.Node, p.Serial, p.ConfigHash = "agent-clemson", 3, "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	p.Lineage = "0b6c3f0e-5d7a-4c2e-9a51-3e8f2d1c7b90"
	p.Switches = scenarioSwitches()
	p.Notes = []string{"fasterdata-40g: Interrupt Binding: disable irqbalance and bind the NIC's IRQs to CPUs of the NIC's NUMA node"}
	return p
}

// scenarioSwitches covers every way a switch shows in a plan: each flow
// action, a switch with nothing to do and one that could not be read.
func scenarioSwitches() []SwitchPlan {
	entry := func(cookie, instructions string) *FlowEntry {
		return &FlowEntry{Cookie: cookie, Instructions: instructions}
	}
	return []SwitchPlan{
		{Switch: "s4810-clemson", DatapathID: "00:00:00:00:00:00:00:01", Connected: true, Changes: []FlowChange{
			{Action: Add, Flow: FlowKey{Table: 0, Priority: 2000, Match: "tcp,nw_src=10.10.1.0/24,nw_dst=10.10.2.1,tp_dst=5201"},
				After: entry("0x5053020000000003", "set_field:02:00:00:00:01:02->eth_dst,output:3"),
				Why:   "whitelist iperf-to-utah client side via agent agent-clemson"},
			{Action: Update, Flow: FlowKey{Table: 0, Priority: 3000, Match: "in_port=3"},
				Before: entry("0x5053010000000001", "drop"),
				After:  entry("0x5053010000000001", "NORMAL"),
				Why:    "bypass agent agent-clemson: the switch has other instructions"},
			{Action: Restore, Flow: FlowKey{Table: 0, Priority: 2000, Match: "tcp,nw_src=10.10.1.0/24,nw_dst=10.10.2.1,tp_dst=22"},
				Before: &FlowEntry{Cookie: "0x5053020000000002", Instructions: "set_field:02:00:00:00:01:02->eth_dst,output:3", IdleTimeout: 60},
				Why:    "owned by the appliance, no longer in the configuration"},
		}},
		{Switch: "s4810-utah", DatapathID: "00:00:00:00:00:00:00:02", Connected: true, Changes: []FlowChange{}},
		{Switch: "sw-lab", DatapathID: "00:00:00:00:00:00:5a:01", Changes: []FlowChange{},
			Error: "not connected: it dials the controller at 0.0.0.0:6653; its flows converge once `sosappliance run` runs here"},
	}
}

func TestDiff(t *testing.T) {
	p := Diff(scenario())
	c := func(action Action, kind, key, before string, beforePresent bool, after string, afterPresent bool, why string, origin ...string) Change {
		ch := Change{Action: action, Kind: kind, Key: key, Before: before, BeforePresent: beforePresent,
			After: after, AfterPresent: afterPresent, Why: why}
		if len(origin) > 0 {
			ch.Origin = origin[0]
		}
		return ch
	}
	want := []Change{
		c(Restore, "sysctl", "net.core.wmem_max", "134217728", true, "212992", true, "put back the value from before serial 1"),
		c(Restore, "sysctl", "net.ipv4.conf.eth9.rp_filter", "", false, "", false, "gone from the host; forget its record"),
		c(Update, "sysctl", "net.core.rmem_max", "212992", true, "134217728", true, "differs from the configuration", "profile fasterdata-40g (sos.hcl:40)"),
		c(Update, "sysctl", "net.ipv4.tcp_congestion_control", "cubic", true, "bbr", true, "drifted from the value applied at serial 2", "sos.hcl:43"),
		c(Update, "sysctl", "net.ipv4.tcp_rmem", "4096 87380 33554432", true, "4096 87380 67108864", true, "configuration changed since serial 2", "sos.hcl:44"),
		c(Restore, "interface", "eth1/txqueuelen", "1000", true, "1000", true, "already at its value from before serial 1; forget its record"),
		c(Update, "interface", "eth1/mtu", "9000", true, "9000", true, "finish the apply interrupted at serial 3", "profile fasterdata-40g (sos.hcl:40)"),
		c(Restore, "relay", "cpus", "13", true, "", false, "remove; it did not exist before serial 2"),
		c(Add, "steering", "route", "", false, "local 0.0.0.0/0 dev lo table 7", true, "applied at serial 1, missing now"),
		c(Add, "steering", "rule", "", false, "fwmark 0x1 lookup 7 priority 100", true, "finish the apply interrupted at serial 3"),
		c(Add, "steering", "nftables", "", false, `{"mark":1,"divert":[]}`, true, "declared, not present", "agent agent-clemson"),
	}
	if !reflect.DeepEqual(p.Changes, want) {
		t.Errorf("changes:\n%s", diffChanges(p.Changes, want))
	}
	if len(p.Warnings) != 1 || p.Warnings[0].Kind != "irq" || p.Warnings[0].Key != "eth1" {
		t.Errorf("warnings = %+v", p.Warnings)
	}
	if add, upd, res := p.Counts(); add != 3 || upd != 4 || res != 4 {
		t.Errorf("Counts = %d %d %d", add, upd, res)
	}
	p.Switches = scenarioSwitches()
	if add, upd, res := p.Counts(); add != 4 || upd != 5 || res != 5 {
		t.Errorf("Counts = %d %d %d", add, upd, res)
	}
	if p.Operation != OperationApply || p.FormatVersion != FormatVersion {
		t.Errorf("header = %+v", p)
	}
}

func diffChanges(got, want []Change) string {
	var b strings.Builder
	for i := 0; i < max(len(got), len(want)); i++ {
		var g, w Change
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		mark := "  "
		if g != w {
			mark = "!!"
		}
		b.WriteString(mark + " got  " + strings.TrimSpace(strings.ReplaceAll(string(mustJSON(g)), "\n", " ")) + "\n")
		if g != w {
			b.WriteString(mark + " want " + strings.TrimSpace(strings.ReplaceAll(string(mustJSON(w)), "\n", " ")) + "\n")
		}
	}
	return b.String()
}

func mustJSON(c Change) []byte {
	b, _ := Encode(Plan{Changes: []Change{c}})
	return b
}

// Diff is pure: the order of its inputs does not matter.
func TestDiffIgnoresInputOrder(t *testing.T) {
	want := Diff(scenario())
	r := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		d, o, a := scenario()
		r.Shuffle(len(d), func(i, j int) { d[i], d[j] = d[j], d[i] })
		r.Shuffle(len(o), func(i, j int) { o[i], o[j] = o[j], o[i] })
		r.Shuffle(len(a), func(i, j int) { a[i], a[j] = a[j], a[i] })
		if got := Diff(d, o, a); !reflect.DeepEqual(got, want) {
			t.Fatalf("shuffled inputs changed the plan:\n%s", diffChanges(got.Changes, want.Changes))
		}
	}
}

func TestDiffOfMatchingHostIsEmpty(t *testing.T) {
	desired := []item.Item{newItem("sysctl", "a", "1"), newItem("steering", "rule", "x")}
	observed := []item.Observation{present("sysctl", "a", "1"), present("steering", "rule", "x")}
	applied := []Owned{{Kind: "steering", Key: "rule", Desired: "x", Applied: true, Serial: 1, FirstSerial: 1}}
	p := Diff(desired, observed, applied)
	if !p.Empty() {
		t.Fatalf("plan for a converged host: %+v", p.Changes)
	}
	if !strings.Contains(p.Text(), "No changes. The host matches the configuration.") {
		t.Errorf("text:\n%s", p.Text())
	}
	// A rollback plan is Diff with nothing desired.
	rb := Diff(nil, observed, applied)
	if len(rb.Changes) != 1 || rb.Changes[0].Action != Restore || rb.Changes[0].AfterPresent {
		t.Fatalf("rollback plan: %+v", rb.Changes)
	}
	rb.Operation = OperationRollback
	rb.Changes = nil
	if !strings.Contains(rb.Text(), "Nothing is recorded to roll back.") {
		t.Errorf("empty rollback text:\n%s", rb.Text())
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from golden file:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

func TestTextGolden(t *testing.T) {
	golden(t, "plan.txt", []byte(scenarioPlan().Text()))
}

func TestJSONGoldenAndRoundTrip(t *testing.T) {
	p := scenarioPlan()
	b, err := Encode(p)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "plan.json", b)
	back, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, p) {
		t.Fatalf("round trip changed the plan:\n%+v\n%+v", back, p)
	}
	empty, err := Decode([]byte(`{"format_version":2,"operation":"rollback","node":"n","serial":0,"changes":null}`))
	if err != nil || empty.Changes == nil || !empty.Empty() {
		t.Fatalf("empty plan: %+v %v", empty, err)
	}
}

func TestDecodeRejectsBadPlans(t *testing.T) {
	const ok = `{"action":"+","kind":"sysctl","key":"k","before_present":false,"after":"1","after_present":true,"why":"w"}`
	const flow = `{"action":"+","flow":{"table":0,"priority":1,"match":""},"before":null,"after":{"cookie":"0x1","instructions":"drop"},"why":"w"}`
	v := fmt.Sprintf(`{"format_version":%d,`, FormatVersion)
	head := v + `"operation":"apply","node":"n","serial":1,"changes":[`
	sw := v + `"operation":"apply","node":"n","serial":1,"changes":[],"switches":[{"switch":"s","datapath_id":"1","connected":true,"changes":[`
	tests := map[string]string{
		"not json":          `plan`,
		"unknown field":     v + `"operation":"apply","changes":[],"extra":true}`,
		"older format":      `{"format_version":1,"operation":"apply","changes":[]}`,
		"newer format":      fmt.Sprintf(`{"format_version":%d,"operation":"apply","changes":[]}`, FormatVersion+1),
		"operation":         v + `"operation":"destroy","changes":[]}`,
		"action":            head + strings.Replace(ok, `"+"`, `"!"`, 1) + `]}`,
		"duplicate":         head + ok + `,` + ok + `]}`,
		"add from value":    head + strings.Replace(ok, `"before_present":false`, `"before_present":true`, 1) + `]}`,
		"absent value":      head + strings.Replace(ok, `"after_present":true`, `"after_present":false`, 1) + `]}`,
		"no key":            head + strings.Replace(ok, `"key":"k"`, `"key":""`, 1) + `]}`,
		"slash in kind":     head + strings.Replace(ok, `"kind":"sysctl"`, `"kind":"a/b"`, 1) + `]}`,
		"update from nil":   head + `{"action":"~","kind":"a","key":"b","after":"1","after_present":true,"why":""}]}`,
		"trailing":          v + `"operation":"apply","changes":[]}{}`,
		"flow action":       sw + strings.Replace(flow, `"+"`, `"!"`, 1) + `]}]}`,
		"flow add from":     sw + strings.Replace(flow, `"before":null`, `"before":{"cookie":"0x1","instructions":"drop"}`, 1) + `]}]}`,
		"flow delete to":    sw + strings.Replace(flow, `"+"`, `"-"`, 1) + `]}]}`,
		"flow update nil":   sw + strings.Replace(flow, `"+"`, `"~"`, 1) + `]}]}`,
		"flow twice":        sw + flow + `,` + flow + `]}]}`,
		"flow unknown":      sw + strings.Replace(flow, `"why"`, `"extra":1,"why"`, 1) + `]}]}`,
		"switch no name":    strings.Replace(sw, `"switch":"s"`, `"switch":""`, 1) + `]}]}`,
		"switch twice":      sw + `]},{"switch":"s","datapath_id":"1","connected":true,"changes":[]}]}`,
		"flow string table": sw + strings.Replace(flow, `"table":0`, `"table":"0"`, 1) + `]}]}`,
	}
	for name, in := range tests {
		if p, err := Decode([]byte(in)); err == nil {
			t.Errorf("%s: Decode succeeded: %+v", name, p)
		}
	}
	// The cases above fail for their own reason, not a broken prefix.
	for name, in := range map[string]string{"host": head + ok + `]}`, "flows": sw + flow + `]}]}`} {
		if _, err := Decode([]byte(in)); err != nil {
			t.Errorf("%s: the good plan is refused: %v", name, err)
		}
	}
}

func TestCheckSavable(t *testing.T) {
	p := scenarioPlan()
	err := p.CheckSavable()
	var ue *UnsavableError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "the plan changes the flows of switch s4810-clemson (3)") ||
		!strings.Contains(err.Error(), "the flows of switch sw-lab could not be read") || strings.Contains(err.Error(), "s4810-utah") {
		t.Fatalf("CheckSavable = %v", err)
	}
	t.Logf("refused as: %v", err)
	p.Switches = p.Switches[1:2] // only the switch with nothing to do
	if err := p.CheckSavable(); err != nil {
		t.Fatalf("a plan with host changes and converged switches: %v", err)
	}
	p.Switches = nil
	if err := p.CheckSavable(); err != nil {
		t.Fatalf("a host-only plan: %v", err)
	}
}

func TestCheckOrigin(t *testing.T) {
	p := scenarioPlan()
	if err := p.CheckOrigin("agent-clemson", p.Lineage); err != nil {
		t.Fatalf("own node and lineage: %v", err)
	}
	tests := []struct {
		node, lineage, want string
	}{
		{"agent-utah", p.Lineage, "plan was made for node agent-clemson, this is node agent-utah"},
		{"agent-clemson", "a0000000-0000-4000-8000-000000000000",
			"plan belongs to another state (lineage 0b6c3f0e-5d7a-4c2e-9a51-3e8f2d1c7b90), this state is lineage a0000000-0000-4000-8000-000000000000"},
	}
	for _, tt := range tests {
		if err := p.CheckOrigin(tt.node, tt.lineage); err == nil || err.Error() != tt.want {
			t.Errorf("CheckOrigin(%s, %s) = %v, want %q", tt.node, tt.lineage, err, tt.want)
		}
	}
	p.Lineage = ""
	var le *LineageError
	if err := p.CheckOrigin("agent-clemson", "x"); !errors.As(err, &le) || !strings.Contains(err.Error(), "(none recorded)") {
		t.Errorf("a plan without lineage: %v", err)
	}
}

func FuzzDecode(f *testing.F) {
	b, _ := Encode(scenarioPlan())
	f.Add(b)
	f.Add([]byte(`{"format_version":2,"operation":"apply","changes":[]}`))
	f.Add([]byte(`{"format_version":2,"operation":"rollback","changes":[{"action":"-","kind":"a","key":"b","before":"x","before_present":true,"why":""}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Decode(data)
		if err != nil {
			return
		}
		out, err := Encode(p)
		if err != nil {
			t.Fatal(err)
		}
		again, err := Decode(out)
		if err != nil || !reflect.DeepEqual(again, p) {
			t.Fatalf("round trip: %v\n%+v\n%+v", err, again, p)
		}
		_ = p.Text()
	})
}

// An irq item's CPU list spreads the IRQs one CPU each, so a line
// "40:0-1 41:0-1" -> "0-1" read as no change. The plan now says what
// each IRQ gets. Found by review (helper-81).
func TestIRQSpreadShownInText(t *testing.T) {
	p := Diff([]item.Item{newItem("irq", "eth1", "0-1"), newItem("irq", "eth2", "0-1")},
		[]item.Observation{present("irq", "eth1", "40:0-1 41:0-1"), absent("irq", "eth2")}, nil)
	text := p.Text()
	for _, want := range []string{
		`~ eth1: "40:0-1 41:0-1" -> "0-1" (one CPU each: 40:0 41:1)`,
		`eth2: (absent) -> "0-1"` + "\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the plan does not say %q:\n%s", want, text)
		}
	}
}

// TestDecodeSaysACutPlanIsCut: a plan file that is empty or ends early
// (saved on a full disk, or a crash before its data reached the disk)
// is refused saying so, at every length, where an empty one gave only
// "plan file: EOF" (found by review, helper-92).
func TestDecodeSaysACutPlanIsCut(t *testing.T) {
	whole, err := Encode(Plan{FormatVersion: FormatVersion, Operation: OperationApply, Node: "n", Serial: 3, Changes: []Change{
		{Action: Add, Kind: "sysctl", Key: "net.core.rmem_max", After: "67108864", AfterPresent: true, Why: "tuning t"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	whole = bytes.TrimRight(whole, "\n")
	for n := range len(whole) {
		_, err := Decode(whole[:n])
		if err == nil || (n == 0 && !strings.Contains(err.Error(), "empty or cut short")) {
			t.Fatalf("the plan cut to %d of %d bytes: %v", n, len(whole), err)
		}
		if strings.Contains(err.Error(), "cut short") && !strings.Contains(err.Error(), "make the plan again") {
			t.Errorf("cut to %d bytes: %v", n, err)
		}
	}
}
