package sdn

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/sdn/flows"
	"github.com/sosappliance/sosappliance/sdn/ovstest"
)

// TestOVSOwnedFlowsOfEveryKindDecode: since a736a2b a dump part
// that does not decode fails the dump (and so every plan, for as long as
// the flow stays). Flows carrying the appliance's cookie but written by
// hand with ovs-ofctl (matches and actions the controller never uses:
// Nicira extensions, ct, learn, meters, groups, write/clear actions...)
// come back from a real Open vSwitch in a form the decoder reads. Held.
// Written by review (helper-69); it passed.
func TestOVSOwnedFlowsOfEveryKindDecode(t *testing.T) {
	ovstest.Require(t, ovstest.Binaries...)
	inst := ovstest.Start(t)
	specs := []string{
		"tcp,tcp_flags=+syn,actions=output:2",
		"ct_state=+trk,tcp,actions=output:2",
		"tcp,actions=ct(commit),output:2",
		"actions=learn(table=1,NXM_OF_VLAN_TCI[0..11],output:NXM_OF_IN_PORT[])",
		"ip,actions=dec_ttl,output:2",
		"tun_id=5,actions=output:2",
		"reg0=5,actions=set_field:3->reg1,resubmit(,2)",
		"pkt_mark=3,actions=output:2",
		"actions=meter:1,output:2",
		"actions=note:0102030405,output:2",
		"actions=write_metadata:0x5/0xff,goto_table:2",
		"actions=clear_actions",
		"actions=write_actions(output:2)",
		"ipv6,ipv6_label=5,actions=output:2",
		"actions=mod_vlan_vid:5,output:2",
		"actions=push_vlan:0x8100,output:2",
		"actions=multipath(eth_src,50,modulo_n,1,0,NXM_NX_REG0[])",
		"actions=bundle(eth_src,0,hrw,ofport,members:1,2)",
		"actions=controller(userdata=01.02),output:2",
		"actions=group:1",
		"in_port=1,actions=output:in_port",
		"actions=sample(probability=65535,collector_set_id=1)",
	}
	for i, s := range specs {
		port := inst.FreePort(t)
		br := inst.AddBridge(t, fmt.Sprintf("brp%d", i), uint64(0x6900+i), fmt.Sprintf("ptcp:%d:127.0.0.1", port))
		br.Ofctl("add-group", "group_id=1,type=all,bucket=output:2")
		br.Ofctl("add-meter", "meter=1,kbps,band=type=drop,rate=1000")
		if err := br.AddFlow(fmt.Sprintf("cookie=%#x,priority=%d,%s", flows.CookiePrefix|0x99, 100, s)); err != nil {

			t.Fatalf("%s: add-flow: %v", s, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		sc, err := Dial(ctx, fmt.Sprintf("tcp:127.0.0.1:%d", port), ConnOptions{Dial: inst.DialContext})
		if err != nil {
			t.Fatal(err)
		}
		fs, err := sc.OwnedFlows(ctx)
		if err != nil || len(fs) != 1 {
			t.Errorf("%s: %d owned flows read, err %v", s, len(fs), err)
		}
		sc.Close()
		cancel()
	}
}
