package tuning

import (
	"bufio"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/host/item"
	"github.com/sosappliance/sosappliance/internal/portrange"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestSteeringNumbersMoveKeepsOpenConnectionInNetns: a reload
// that moves steering_mark, steering_table and steering_priority while a
// steered TCP connection is open through the transparent listener (over
// veths from a client namespace). The steps run in the plan's order
// (route, rule, table); after each one the connection must still carry
// data both ways, and a new connection must be diverted once the move is
// done. Moves: all three at once, to the edges (top-bit mark, table past
// 2^31, priority 1), the mark alone, the priority alone, the table
// alone, and back to the defaults. Written by review (helper-80); the
// host tests of a move look at `ip route get`, not at a connection.
func TestSteeringNumbersMoveKeepsOpenConnectionInNetns(t *testing.T) {
	if !testsupport.InFreshNetns(t, "nft", "ip") {
		return
	}
	_, client := divertTopology(t)
	spec := divertSpec(portrange.Single(5201))
	applySpec(t, spec)
	echoWithLocalAddr(t)

	c := dialFrom(t, client, "10.9.2.1:5201")
	defer c.Close()
	r := bufio.NewReader(c)
	if got, err := roundtrip(c, r, "start"); err != nil || got != "10.9.2.1:5201 start" {
		t.Fatalf("before any move: %q, %v", got, err)
	}
	s := NewSteering()
	moves := [][3]uint32{
		{0x5350, 200, 100},
		{0x80000001, 0x80000000, 1},
		{0x5351, 0x80000000, 1},
		{0x5351, 0x80000000, 32765},
		{0x5351, 4000000000, 32765},
		{0, 0, 0},
	}
	for i, m := range moves {
		spec.Mark, spec.RouteTable, spec.RulePriority = m[0], m[1], m[2]
		items, err := spec.Items()
		if err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{item.SteeringKeyRoute, item.SteeringKeyRule, item.SteeringKeyNftables} {
			for _, it := range items {
				if it.Kind != item.KindSteering || it.Key != key {
					continue
				}
				if err := s.Apply(context.Background(), it); err != nil {
					t.Fatalf("move %d %v: apply %s: %v", i, m, key, err)
				}
				msg := fmt.Sprintf("m%d-%s", i, key)
				got, err := roundtrip(c, r, msg)
				if err != nil || got != "10.9.2.1:5201 "+msg {
					t.Fatalf("move %d %v: the open connection after the %s step: %q, %v\nrules:\n%s\nroutes:\n%s",
						i, m, key, got, err, run(t, "ip", "rule", "show"), run(t, "ip", "route", "show", "table", "all", "proto", "83"))
				}
			}
		}
		n := dialFrom(t, client, "10.9.2.1:5201")
		got, err := roundtrip(n, bufio.NewReader(n), "new")
		n.Close()
		if err != nil || got != "10.9.2.1:5201 new" {
			t.Errorf("move %d %v: a new connection: %q, %v", i, m, got, err)
		}
		rules := run(t, "ip", "rule", "show")
		if strings.Count(rules, "proto 83") != 1 {
			t.Errorf("move %d %v: rules left:\n%s", i, m, rules)
		}
	}
}
