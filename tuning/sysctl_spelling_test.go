package tuning

import (
	"context"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/sosappliance/sosappliance/host/item"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestReservedPortsRangeValidInNetns: net.ipv4.ip_local_reserved_ports
// is a port list ("30000-32767", "8080,9000-9010"), not integers; it is
// "" after every boot. The first checkDecimal took a range, made only of
// digits and '-', for a signed integer, and "" for "every field an
// integer", and refused what the kernel takes and reads back as written.
// Found by review (helper-59).
func TestReservedPortsRangeValidInNetns(t *testing.T) {
	if !testsupport.InFreshNetns(t) {
		return
	}
	ctx := context.Background()
	s := NewSysctl("/")
	const key = "net.ipv4.ip_local_reserved_ports"
	for _, v := range []string{"30000-32767", "8080", "8080-8090"} {
		it := item.Item{Kind: item.KindSysctl, Key: key, Value: v}
		before := observeOne(t, s, it)
		verr := s.Validate(ctx, []item.Item{it})
		aerr := s.Apply(ctx, it)
		after := observeOne(t, s, it)
		t.Logf("current %q, want %q: Validate: %v; Apply: %v; reads back %q", before.Value, v, verr, aerr, after.Value)
		if aerr == nil && after.Value == v && verr != nil {
			t.Errorf("%s = %q refused at plan, though the kernel takes it and reads it back as written: %v", key, v, verr)
		}
	}
}

// TestHexBitmapAsTheKernelPrintsIt: net.core.flow_limit_cpu_bitmap and
// net.core.rps_default_mask are hex CPU bitmaps the kernel prints padded
// to nr_cpu_ids/4 digits: "00" on a host of 5 to 8 CPUs, which parses as
// a decimal integer. "03" (CPUs 0 and 1) is what the kernel prints back,
// yet the first checkDecimal refused it and advised "3", which the
// kernel prints back as "03". Now a parameter shown with leading zeros is
// not taken for a decimal one. A tree stands for such a host's /proc/sys
// (the padding is the kernel's format, not observed here: this machine
// has 2 CPUs). Found by review (helper-59).
func TestHexBitmapAsTheKernelPrintsIt(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{
		"proc/sys/net/core/flow_limit_cpu_bitmap": "00\n",
		"proc/sys/net/core/rps_default_mask":      "00\n",
	})
	s := NewSysctl(root)
	for _, key := range []string{"net.core.flow_limit_cpu_bitmap", "net.core.rps_default_mask"} {
		it := item.Item{Kind: item.KindSysctl, Key: key, Value: "03"}
		err := s.Validate(context.Background(), []item.Item{it})
		t.Logf("%s = \"03\" (host shows \"00\"): %v", key, err)
		if err != nil {
			t.Errorf("%s = %q, the kernel's own spelling of CPUs 0-1 on an 8-CPU host, refused: %v", key, it.Value, err)
		}
	}
}

// TestHexBeyondInt64Refused: kernel.shmmax and kernel.shmall are
// unsigned longs whose default, 18446744073692774399, is no int64. The
// second checkDecimal took such a parameter for "not integers" and let
// any spelling through, and a value past int64 written in hex
// ("0xffffffffffffffff") was never odd. The kernel reads both in hex and
// prints them back in decimal. Both are read as unsigned too now. Found
// by review (helper-61).
func TestHexBeyondInt64Refused(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{
		"proc/sys/kernel/shmmax": "18446744073692774399\n",
		"proc/sys/kernel/shmall": "4294967296\n",
	})
	s := NewSysctl(root)
	for _, it := range []item.Item{
		{Kind: item.KindSysctl, Key: "kernel.shmmax", Value: "0x100000000"},
		{Kind: item.KindSysctl, Key: "kernel.shmall", Value: "0xffffffffffffffff"},
		{Kind: item.KindSysctl, Key: "kernel.shmall", Value: "0x10"}, // control: in int64
	} {
		err := s.Validate(context.Background(), []item.Item{it})
		t.Logf("%s = %q: %v", it.Key, it.Value, err)
		if err == nil {
			t.Errorf("%s = %q let through: the kernel reads it in hex and prints it in decimal", it.Key, it.Value)
		}
	}
}

// TestShmmaxHexReadsBackDecimal: on the real kernel, in a fresh IPC
// namespace: what Apply of such a value leaves (the kernel's decimal).
// Written by review (helper-61).
func TestShmmaxHexReadsBackDecimal(t *testing.T) {
	if os.Getenv("REVIEW61_IPC") == "1" {
		s := NewSysctl("/")
		it := item.Item{Kind: item.KindSysctl, Key: "kernel.shmmax", Value: "0x100000000"}
		aerr := s.Apply(context.Background(), it)
		after := observeOne(t, s, it)
		t.Logf("Apply %q: %v; reads back %q", it.Value, aerr, after.Value)
		return
	}
	if os.Geteuid() != 0 {
		t.Fatal("needs root for an IPC namespace")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestShmmaxHexReadsBackDecimal$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "REVIEW61_IPC=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWIPC}
	out, err := cmd.CombinedOutput()
	t.Logf("child in a fresh IPC namespace:\n%s", out)
	if err != nil {
		t.Errorf("child: %v", err)
	}
}

// TestCheckDecimalEdges: on a parameter the host shows as plain
// decimal (kernel.shmmax, past int64), what checkDecimal refuses and
// takes: the kernel would read "-0", "00", "+1", "0x10", "1_0" and
// "0x8000000000000000" otherwise than written (or refuse them), and takes
// and reads back plain decimal up to uint64's max; integers past 64 bits
// are refused at plan, which before left them to fail at apply. Written
// by review (helper-62); it passed.
func TestCheckDecimalEdges(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{
		"proc/sys/kernel/shmmax":     "18446744073692774399\n",
		"proc/sys/net/ipv4/tcp_rmem": "4096\t131072\t6291456\n",
	})
	s := NewSysctl(root)
	// Past 64 bits either way too: the kernel refuses those at apply,
	// so validate says so first.
	refuse := []string{"-0", "00", "+1", "0x10", "1_0", "0x8000000000000000", "-00", "+0", "0o17", "01",
		"-9223372036854775809", "18446744073709551616", "99999999999999999999999"}
	take := []string{"0", "1", "18446744073709551615", "9223372036854775808", "-1", "-9223372036854775808"}
	// Not refused at plan: the kernel refuses them at apply (no drift).
	noDrift := []string{"--5", "1-2"}
	for _, v := range refuse {
		err := s.Validate(context.Background(), []item.Item{{Kind: item.KindSysctl, Key: "kernel.shmmax", Value: v}})
		t.Logf("%q: %v", v, err)
		if err == nil {
			t.Errorf("kernel.shmmax = %q taken", v)
		}
	}
	for _, v := range append(take, noDrift...) {
		err := s.Validate(context.Background(), []item.Item{{Kind: item.KindSysctl, Key: "kernel.shmmax", Value: v}})
		t.Logf("%q: %v", v, err)
		if err != nil {
			t.Errorf("kernel.shmmax = %q refused: %v", v, err)
		}
	}
	// A list of its own, shown as one integer, takes commas.
	writeTree(t, root, map[string]string{"proc/sys/net/ipv4/ip_local_reserved_ports": "8080\n"})
	if err := s.Validate(context.Background(), []item.Item{{Kind: item.KindSysctl, Key: "net.ipv4.ip_local_reserved_ports", Value: "8080,9148"}}); err != nil {
		t.Errorf("reserved ports with a comma refused: %v", err)
	}
	// A text parameter may hold any digits.
	writeTree(t, root, map[string]string{"proc/sys/kernel/core_pattern": "core\n"})
	if err := s.Validate(context.Background(), []item.Item{{Kind: item.KindSysctl, Key: "kernel.core_pattern", Value: "18446744073709551616"}}); err != nil {
		t.Errorf("text parameter's digits refused: %v", err)
	}
	err := s.Validate(context.Background(), []item.Item{{Kind: item.KindSysctl, Key: "net.ipv4.tcp_rmem", Value: "4096 0x20000 6291456"}})
	t.Logf("tcp_rmem with a hex field: %v", err)
	if err == nil {
		t.Errorf("tcp_rmem with a hex field taken")
	}
}
