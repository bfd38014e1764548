package profiles

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestProfilesTheKernelTakes: every key of every profile exists in
// this kernel's /proc/sys; numbers fit the kernel's int; the tcp_rmem and
// tcp_wmem triples are ordered; and the per-namespace values are written
// in a fresh network namespace (unshare -n, gone when the shell exits) and
// read back as the profile spells them once blanks are collapsed.
// Written by review (helper-70); it passed.
func TestProfilesTheKernelTakes(t *testing.T) {
	for _, name := range Names() {
		p, ok := Lookup(name)
		if !ok {
			t.Fatalf("%s: not found", name)
		}
		var script strings.Builder
		var checked []Sysctl
		for _, s := range p.Sysctls {
			path := "/proc/sys/" + strings.ReplaceAll(s.Key, ".", "/")
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s: %s: %v", name, s.Key, err)
				continue
			}
			if s.Source == "" {
				t.Errorf("%s: %s has no source", name, s.Key)
			}
			fields := strings.Fields(s.Value)
			var nums []int64
			for _, f := range fields {
				if n, err := strconv.ParseInt(f, 10, 64); err == nil {
					if n < 0 || n > 1<<31-1 {
						t.Errorf("%s: %s = %s: %d does not fit the kernel's int", name, s.Key, s.Value, n)
					}
					nums = append(nums, n)
				}
			}
			if strings.HasSuffix(s.Key, "tcp_rmem") || strings.HasSuffix(s.Key, "tcp_wmem") {
				if len(nums) != 3 || nums[0] > nums[1] || nums[1] > nums[2] {
					t.Errorf("%s: %s = %q is not min <= default <= max", name, s.Key, s.Value)
				}
			}
			if strings.HasPrefix(s.Key, "net.ipv4.") {
				script.WriteString("sysctl -q -w '" + s.Key + "=" + s.Value + "' && tr -s '\\t ' '  ' < " + path + " && ")
				checked = append(checked, s)
			}
		}
		if p.MTU != 0 && (p.MTU < 68 || p.MTU > 65535) {
			t.Errorf("%s: MTU %d", name, p.MTU)
		}
		script.WriteString("true")
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		out, err := exec.CommandContext(ctx, "unshare", "-n", "sh", "-c", script.String()).CombinedOutput()
		cancel()
		if err != nil {
			t.Errorf("%s: kernel refused: %v: %s", name, err, out)
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) != len(checked) {
			t.Errorf("%s: %d lines for %d values: %q", name, len(lines), len(checked), out)
			continue
		}
		for i, s := range checked {
			if got := strings.TrimSpace(lines[i]); got != strings.Join(strings.Fields(s.Value), " ") {
				t.Errorf("%s: %s = %q reads back %q", name, s.Key, s.Value, got)
			}
		}
	}
}
