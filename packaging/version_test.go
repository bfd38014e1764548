package packaging

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

func TestPackageVersion(t *testing.T) {
	committed := time.Date(2025, 1, 2, 23, 30, 0, 0, time.FixedZone("UTC-5", -5*3600)) // 2025-01-03 in UTC
	cases := []struct {
		describe string
		want     string
	}{
		{"v1.2.3", "1.2.3"},
		{"1.2.3", "1.2.3"},
		{"v1.2.3-rc1", "1.2.3~rc1"},
		{"v1.2.3-4-gabc1234", "1.2.3+git20250103.4.abc1234"},
		{"v1.2.3-rc1-4-gabc1234", "1.2.3~rc1+git20250103.4.abc1234"},
		{"abc1234", "0.0.0~git20250103043000.abc1234"},
		{"abc1234-dirty", "0.0.0~git20250103043000.abc1234.dirty"},
		{"v1.2.3-dirty", "1.2.3+dirty"},
		{"v1.2.3-4-gabc1234-dirty", "1.2.3+git20250103.4.abc1234.dirty"},
		{"v2.0.0\n", "2.0.0"},
	}
	for _, c := range cases {
		got, err := PackageVersion(c.describe, committed)
		if err != nil {
			t.Errorf("PackageVersion(%q): %v", c.describe, err)
			continue
		}
		if got != c.want {
			t.Errorf("PackageVersion(%q) = %q, want %q", c.describe, got, c.want)
		}
	}

	for _, bad := range []string{"", "release_1", "v1.2.3 beta", "-dirty", "vfoo"} {
		if got, err := PackageVersion(bad, committed); err == nil {
			t.Errorf("PackageVersion(%q) = %q, want an error", bad, got)
		}
	}
}

// TestPackageVersionOrder asks dpkg and rpm themselves that the versions
// sort the way releases and snapshots happen: snapshot before the first
// tag, rc before release, commits after a tag after it.
func TestPackageVersionOrder(t *testing.T) {
	testsupport.RequireBinaries(t, "dpkg", "rpm")
	day := time.Date(2025, 1, 2, 12, 0, 0, 0, time.UTC)
	ordered := []struct {
		describe string
		when     time.Time
	}{
		{"abc1234", day},
		{"def5678", day.AddDate(0, 0, 1)},
		{"v0.1.0-rc1", day},
		{"v0.1.0-rc1-3-g0123456", day},
		{"v0.1.0", day},
		{"v0.1.0-dirty", day},
		{"v0.1.0-2-gabc1234", day},
		{"v0.1.0-2-gabc1234-dirty", day},
		{"v0.1.1", day},
	}
	var versions []string
	for _, o := range ordered {
		v, err := PackageVersion(o.describe, o.when)
		if err != nil {
			t.Fatal(err)
		}
		versions = append(versions, v)
	}
	for i := 1; i < len(versions); i++ {
		older, newer := versions[i-1], versions[i]
		out, err := exec.Command("dpkg", "--compare-versions", older+"-"+Revision, "lt", newer+"-"+Revision).CombinedOutput()
		if err != nil {
			t.Errorf("dpkg does not sort %s before %s: %v %s", older, newer, err, strings.TrimSpace(string(out)))
		}
		lua := fmt.Sprintf(`%%{lua: print(rpm.vercmp(%q, %q))}`, older, newer)
		out, err = exec.Command("rpm", "--eval", lua).CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "-1" {
			t.Errorf("rpm does not sort %s before %s: %v %s", older, newer, err, strings.TrimSpace(string(out)))
		}
	}
}
