package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

func TestParseChangelog(t *testing.T) {
	md, err := os.ReadFile(filepath.Join("testdata", "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseChangelog(string(md))
	if err != nil {
		t.Fatal(err)
	}
	want := []Release{
		{Changes: []string{
			"Added: A feature whose description is long enough that the Debian changelog has to wrap it over more than one line, since lintian wants at most 80 columns.",
			"Fixed: A fix written with an asterisk.",
		}},
		{Version: "1.1.0-rc1", Date: time.Date(2025, 3, 4, 0, 0, 0, 0, time.UTC)},
		{Version: "1.0.0", Date: time.Date(2025, 1, 2, 0, 0, 0, 0, time.UTC), Changes: []string{
			"Added: The first release.",
			"Added: Another item continued on a second line.",
		}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseChangelog:\n got %#v\nwant %#v", got, want)
	}
}

func TestParseChangelogRejectsBadHeading(t *testing.T) {
	for _, md := range []string{"## [1.0.0] on 2025-01-02\n", "## [1.0.0] - 2025-13-45\n", "## [1.0.0] - 2025-01-02 later\n"} {
		if _, err := ParseChangelog(md); err == nil {
			t.Errorf("ParseChangelog(%q) accepted a malformed release heading", md)
		}
	}
}

func TestDebianChangelogGolden(t *testing.T) {
	md, err := os.ReadFile(filepath.Join("testdata", "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	releases, err := ParseChangelog(string(md))
	if err != nil {
		t.Fatal(err)
	}
	built := time.Date(2025, 5, 6, 7, 8, 9, 0, time.UTC)
	got := DebianChangelog("demo", "1.1.0+git20250506.3.abc1234", "1", "Demo Maintainers <demo@example.org>", built, releases)
	golden := filepath.Join("testdata", "changelog.Debian")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("Debian changelog differs from %s:\n%s", golden, got)
	}
	for _, l := range strings.Split(got, "\n") {
		if len(l) > 80 {
			t.Errorf("line longer than 80 columns: %q", l)
		}
	}
	checkWithDpkg(t, got, []string{"1.1.0+git20250506.3.abc1234-1", "1.1.0~rc1-1", "1.0.0-1"})
}

// TestDebianChangelogHeads checks which entry heads the log for each kind
// of build: released version, snapshot after a release, empty Unreleased.
func TestDebianChangelogHeads(t *testing.T) {
	built := time.Date(2025, 5, 6, 7, 8, 9, 0, time.UTC)
	released := []Release{{Version: "v1.0.0", Date: time.Date(2025, 1, 2, 0, 0, 0, 0, time.UTC), Changes: []string{"First."}}}
	cases := []struct {
		name     string
		upstream string
		releases []Release
		versions []string
		mentions string
	}{
		{"tagged build", "1.0.0", released, []string{"1.0.0-1"}, "First."},
		{"snapshot after a release", "1.0.0+git20250506.2.abc1234", released, []string{"1.0.0+git20250506.2.abc1234-1", "1.0.0-1"}, "Snapshot build 1.0.0+git20250506.2.abc1234"},
		{"empty unreleased", "0.0.0~git20250506.abc1234", []Release{{}}, []string{"0.0.0~git20250506.abc1234-1"}, "Snapshot build"},
		{"no changelog sections", "0.0.0~git20250506.abc1234", nil, []string{"0.0.0~git20250506.abc1234-1"}, "Snapshot build"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := DebianChangelog("demo", c.upstream, "1", "Demo Maintainers <demo@example.org>", built, c.releases)
			if !strings.Contains(got, c.mentions) {
				t.Errorf("changelog lacks %q:\n%s", c.mentions, got)
			}
			checkWithDpkg(t, got, c.versions)
		})
	}
}

// TestRepositoryChangelog keeps the project's own CHANGELOG.md in the shape
// the packages need.
func TestRepositoryChangelog(t *testing.T) {
	md, err := os.ReadFile(filepath.Join("..", "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	releases, err := ParseChangelog(string(md))
	if err != nil {
		t.Fatal(err)
	}
	if len(releases) == 0 {
		t.Fatal("CHANGELOG.md has no release sections")
	}
	got := DebianChangelog(PackageName, "0.0.0~git20250506.abc1234", Revision, DefaultMaintainer, time.Now(), releases)
	checkWithDpkg(t, got, nil)
}

// checkWithDpkg has dpkg-parsechangelog read the changelog and compares
// the versions of its entries, newest first.
func checkWithDpkg(t *testing.T, changelog string, versions []string) {
	t.Helper()
	testsupport.RequireBinaries(t, "dpkg-parsechangelog")
	path := filepath.Join(t.TempDir(), "changelog")
	if err := os.WriteFile(path, []byte(changelog), 0o644); err != nil {
		t.Fatal(err)
	}
	// rfc822 format gives one stanza, with its Version, per entry.
	// Warnings go to standard error; the entries themselves may say
	// "warning" on standard output.
	var stderr strings.Builder
	cmd := exec.Command("dpkg-parsechangelog", "-l", path, "--all", "--format", "rfc822")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("dpkg-parsechangelog: %v\n%s%s\n%s", err, out, stderr.String(), changelog)
	}
	if strings.Contains(stderr.String(), "warning") {
		t.Errorf("dpkg-parsechangelog warns:\n%s", stderr.String())
	}
	if versions == nil {
		return
	}
	var got []string
	for _, l := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(l, "Version: "); ok {
			got = append(got, v)
		}
	}
	if !reflect.DeepEqual(got, versions) {
		t.Errorf("entry versions = %q, want %q\n%s", got, versions, changelog)
	}
}
