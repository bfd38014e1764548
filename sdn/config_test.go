package sdn_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/sdn"
	"github.com/sosappliance/sosappliance/sdn/flows"
)

func TestUpdateRefusesAmbiguousSwitches(t *testing.T) {
	a, b := siteSwitch(1), siteSwitch(2)
	b.Name = "sw-b"
	cases := map[string][]flows.Switch{
		"declared twice":     {a, a},
		"share datapath":     {a, func() flows.Switch { s := siteSwitch(1); s.Name = "other"; return s }()},
		"is not tcp:IP:PORT": {func() flows.Switch { s := a; s.Connect = "ptcp:6653"; return s }()},
	}
	for want, switches := range cases {
		if _, err := sdn.New(sdn.Config{Switches: switches}, nil); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: New = %v", want, err)
		}
	}
	c, err := sdn.New(sdn.Config{Switches: []flows.Switch{a, b}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Update([]flows.Switch{a, a}, nil); err == nil {
		t.Error("Update accepted a duplicate")
	}
	if got := len(c.Status().Switches); got != 2 {
		t.Errorf("a refused Update changed the switch set: %d switches", got)
	}
}

func TestRunListens(t *testing.T) {
	c, err := sdn.New(sdn.Config{Listen: "127.0.0.1:0"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	time.Sleep(100 * time.Millisecond)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	bad, _ := sdn.New(sdn.Config{Listen: "not-an-address"}, nil)
	if err := bad.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "openflow listen") {
		t.Fatalf("Run with a bad listen address: %v", err)
	}
}
