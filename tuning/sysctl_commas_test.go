package tuning

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/host/item"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestSysctlUnitsAndCommasNoFalseRefusal: checkDecimal now
// refuses, for a parameter the kernel shows as plain integers, a value
// with a unit ("1k") or with comma-joined fields. Every writable
// parameter of a fresh network namespace (what a network namespace
// shows is its own: the global ones are absent or read-only there) that
// shows plain integers is written each such spelling; a spelling the
// kernel takes must not be refused at plan (a false refusal blocks a
// valid file). No parameter takes a unit or commas where it shows
// integers but ip_local_reserved_ports, which is let through. Written by
// review (helper-83); it passed.
func TestSysctlUnitsAndCommasNoFalseRefusal(t *testing.T) {
	if !testsupport.InFreshNetns(t) {
		return
	}
	ctx := context.Background()
	s := NewSysctl("/")
	base := "/proc/sys"
	plain := func(fields []string) bool {
		for _, f := range fields {
			if n, err := strconv.ParseUint(strings.TrimPrefix(f, "-"), 10, 64); err != nil || strconv.FormatUint(n, 10) != strings.TrimPrefix(f, "-") {
				return false
			}
		}
		return len(fields) > 0
	}
	checked := 0
	var missed []string
	err := filepath.WalkDir(filepath.Join(base, "net"), func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return nil
		}
		info, err := e.Info()
		if err != nil || info.Mode().Perm()&0o200 == 0 {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		current := strings.TrimSpace(string(b))
		fields := strings.Fields(current)
		if !plain(fields) {
			return nil
		}
		rel, _ := filepath.Rel(base, p)
		parts := strings.Split(rel, "/")
		for i := range parts {
			parts[i] = strings.ReplaceAll(parts[i], ".", "/")
		}
		key := strings.Join(parts, ".")
		candidates := []string{"1k", "1,2"}
		if len(fields) > 1 {
			last := append(append([]string{}, fields[:len(fields)-1]...), "1k")
			candidates = []string{strings.Join(fields, ","), strings.Join(last, " ")}
		}
		checked++
		for _, v := range candidates {
			verr := s.Validate(ctx, []item.Item{{Kind: item.KindSysctl, Key: key, Value: v}})
			werr := os.WriteFile(p, []byte(v), 0)
			if werr == nil {
				_ = os.WriteFile(p, []byte(current), 0)
			}
			if werr != nil && verr == nil {
				missed = append(missed, key+" = "+strconv.Quote(v))
			}
			if werr == nil && verr != nil {
				t.Errorf("%s = %q: the kernel takes it (it shows %q), plan refuses it: %v", key, v, current, verr)
			}
		}
		return nil
	})
	testsupport.RequireNoError(t, err)
	t.Logf("%d parameters showing plain integers checked; plan takes, the kernel refuses: %d, e.g. %v", checked, len(missed), missed[:min(len(missed), 5)])
	if checked < 50 {
		t.Errorf("only %d parameters checked", checked)
	}
}
