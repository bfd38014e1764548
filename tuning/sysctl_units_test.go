package tuning

import (
	"context"
	"testing"

	"github.com/sosappliance/sosappliance/host/item"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestSysctlValueTheKernelRefusesIsRefusedAtPlan: sos.hcl takes
// sizes with units elsewhere ("60KB", "1GiB" for chunk_size and limits),
// so an operator writes "net.core.wmem_max" = "64MiB", or a triple with
// commas. validate and plan take them ("~ net.ipv4.tcp_wmem: ... ->
// \"4096 65536 32MiB\""), and apply fails at the kernel ("invalid
// argument"), after which the next plan calls it "finish the apply
// interrupted at serial N". Each value here is written to the kernel of a
// fresh network namespace (per-namespace parameters); where the kernel
// refuses it, Validate (plan) now refuses it first, with the value in
// bytes or with spaces. Found by review (helper-81).
func TestSysctlValueTheKernelRefusesIsRefusedAtPlan(t *testing.T) {
	if !testsupport.InFreshNetns(t) {
		return
	}
	ctx := context.Background()
	s := NewSysctl("/")
	for _, c := range []struct{ key, value string }{
		{"net.core.somaxconn", "4Ki"},
		{"net.ipv4.tcp_wmem", "4096 65536 32MiB"},
		{"net.ipv4.tcp_rmem", "4096,87380,33554432"},
		// Commas written any other way (found by review of the first
		// fix, helper-83).
		{"net.ipv4.tcp_rmem", "4096, 87380, 33554432"},
		{"net.ipv4.tcp_wmem", "4096 65536 33,554,432"},
		{"net.core.somaxconn", "4,096"},
	} {
		it := item.Item{Kind: item.KindSysctl, Key: c.key, Value: c.value}
		verr := s.Validate(ctx, []item.Item{it})
		aerr := s.Apply(ctx, it)
		t.Logf("%s = %q: Validate: %v; Apply: %v", c.key, c.value, verr, aerr)
		if aerr != nil && verr == nil {
			t.Errorf("%s = %q passed plan's check, then the kernel refused it at apply: %v", c.key, c.value, aerr)
		}
	}
}
