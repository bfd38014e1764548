package ovstest

import (
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestParseDumpFlows(t *testing.T) {
	out := `OFPST_FLOW reply (OF1.3) (xid=0x2):
 cookie=0x5053000000000001, duration=3.019s, table=0, n_packets=7, n_bytes=518, priority=2000,tcp,nw_src=10.0.0.0/24,nw_dst=10.0.1.1,tp_dst=5201 actions=set_field:02:00:00:00:01:02->eth_dst,output:3
 cookie=0x0, duration=0.5s, table=1, n_packets=0, n_bytes=0, send_flow_rem priority=5 actions=drop
 cookie=0x0, duration=1s, table=0, n_packets=0, n_bytes=0, actions=NORMAL
`
	flows, err := ParseDumpFlows(out)
	if err != nil {
		t.Fatal(err)
	}
	want := []DumpedFlow{
		{Cookie: 0x5053000000000001, Table: 0, Packets: 7, Bytes: 518, Priority: 2000,
			Match: "tcp,nw_src=10.0.0.0/24,nw_dst=10.0.1.1,tp_dst=5201", Actions: "set_field:02:00:00:00:01:02->eth_dst,output:3"},
		{Table: 1, Priority: 5, Actions: "drop"},
		{Priority: 32768, Actions: "NORMAL"},
	}
	if len(flows) != len(want) {
		t.Fatalf("got %d flows, want %d", len(flows), len(want))
	}
	for i, w := range want {
		g := flows[i]
		g.Duration, g.Line = 0, ""
		if g != w {
			t.Errorf("flow %d:\n got %+v\nwant %+v", i, g, w)
		}
	}
}

// TestInstanceForwards runs the real thing: two hosts on a secure-mode bridge
// connect over TCP only once a NORMAL flow exists.
func TestInstanceForwards(t *testing.T) {
	inst := Start(t)
	br := inst.AddBridge(t, "br0", 0x42)
	macA, _ := net.ParseMAC("02:00:00:00:00:0a")
	macB, _ := net.ParseMAC("02:00:00:00:00:0b")
	a := br.AttachHost(t, 1, macA, netip.MustParsePrefix("10.99.0.1/24"))
	b := br.AttachHost(t, 2, macB, netip.MustParsePrefix("10.99.0.2/24"))
	var ln net.Listener
	if err := b.InNamespace(func() (err error) { ln, err = net.Listen("tcp", "10.99.0.2:7000"); return err }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	dial := func(timeout time.Duration) error {
		return a.InNamespace(func() error {
			c, err := net.DialTimeout("tcp", "10.99.0.2:7000", timeout)
			if err == nil {
				c.Close()
			}
			return err
		})
	}
	if err := dial(time.Second); err == nil {
		t.Fatal("TCP passed a secure-mode bridge without flows")
	}
	if err := br.AddFlow("priority=1,actions=NORMAL"); err != nil {
		t.Fatal(err)
	}
	if err := dial(10 * time.Second); err != nil {
		t.Fatalf("TCP with a NORMAL flow: %v", err)
	}
	flows, err := br.DumpFlows()
	if err != nil {
		t.Fatal(err)
	}
	if len(flows) != 1 || flows[0].Actions != "NORMAL" || flows[0].Packets == 0 {
		t.Fatalf("flows after ping: %+v", flows)
	}
	out, err := inst.Vsctl("get", "bridge", "br0", "datapath_type")
	if err != nil || !strings.Contains(out, "netdev") {
		t.Fatalf("datapath_type = %q, %v", out, err)
	}
}
