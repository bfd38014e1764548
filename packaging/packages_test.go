package packaging

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// The packages are built once per test binary, into a directory removed
// when the tests end, and shared by the tests below.
var (
	buildOnce    sync.Once
	buildDir     string
	buildVersion string
	buildPaths   []string
	buildErr     error
)

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

type builtPackage struct {
	format, arch, path string
}

// builtPackages runs the same build as `make packages`, for amd64 and arm64.
func builtPackages(t *testing.T) (version string, pkgs []builtPackage) {
	t.Helper()
	if testing.Short() {
		t.Skip("cross-compiling and packaging takes about a minute; left out of -short")
	}
	testsupport.RequireBinaries(t, "go", "git")
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "sosappliance-packages-")
		if buildErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
		defer cancel()
		if buildVersion, buildErr = GitVersion(ctx, ".."); buildErr != nil {
			return
		}
		buildPaths, buildErr = Build(ctx, Options{RepoDir: "..", OutDir: buildDir, Version: buildVersion})
	})
	if buildErr != nil {
		t.Fatalf("build packages: %v", buildErr)
	}
	want := map[string]string{
		"deb/amd64": fmt.Sprintf("sosappliance_%s-1_amd64.deb", buildVersion),
		"deb/arm64": fmt.Sprintf("sosappliance_%s-1_arm64.deb", buildVersion),
		"rpm/amd64": fmt.Sprintf("sosappliance-%s-1.x86_64.rpm", buildVersion),
		"rpm/arm64": fmt.Sprintf("sosappliance-%s-1.aarch64.rpm", buildVersion),
	}
	if len(buildPaths) != len(want) {
		t.Fatalf("built %q, want the four packages %q", buildPaths, want)
	}
	for key, name := range want {
		path := filepath.Join(buildDir, name)
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("%s package: %v (built %q)", key, err, buildPaths)
		}
		format, arch, _ := strings.Cut(key, "/")
		pkgs = append(pkgs, builtPackage{format, arch, path})
	}
	return buildVersion, pkgs
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

func sourceFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", path))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// startsOrEnables finds a command in a maintainer script that would start
// or enable the service (try-restart of a running one is allowed).
var startsOrEnables = regexp.MustCompile(`(?m)^\s*(systemctl|deb-systemd-invoke|deb-systemd-helper)\b[^\n]*\s(start|restart|enable|reenable|--now)(\s|$)`)

// withoutStartAgain is a maintainer script without its start_again
// function, which starts again a daemon that prerm stopped for a removal
// or a deconfigure that did not go through: the one start a script may
// make.
func withoutStartAgain(script string) string {
	start := strings.Index(script, "\nstart_again() {\n")
	if start < 0 {
		return script
	}
	end := strings.Index(script[start:], "\n}\n")
	if end < 0 {
		return script
	}
	return script[:start] + script[start+end:]
}

var elfMachine = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

func TestDebPackages(t *testing.T) {
	testsupport.RequireBinaries(t, "dpkg-deb")
	version, pkgs := builtPackages(t)
	for _, p := range pkgs {
		if p.format != "deb" {
			continue
		}
		t.Run(p.arch, func(t *testing.T) {
			fields := run(t, "dpkg-deb", "-f", p.path, "Package", "Version", "Architecture", "Depends", "Section", "Priority")
			wantFields := fmt.Sprintf("Package: sosappliance\nVersion: %s-1\nArchitecture: %s\nDepends: nftables, iproute2\nSection: net\nPriority: optional\n", version, p.arch)
			if fields != wantFields {
				t.Errorf("control fields:\n%s\nwant:\n%s", fields, wantFields)
			}
			run(t, "dpkg-deb", "--info", p.path) // the whole control archive must be readable

			wantModes := map[string]string{
				"./usr/bin/sosappliance":                                  "-rwxr-xr-x",
				"./lib/systemd/system/sosappliance.service":               "-rw-r--r--",
				"./etc/sosappliance/":                                     "drwxr-xr-x",
				"./etc/sosappliance/sos.hcl":                              "-rw-r--r--",
				"./var/lib/sosappliance/":                                 "drwxr-x---",
				"./usr/share/bash-completion/completions/sosappliance":    "-rw-r--r--",
				"./usr/share/zsh/vendor-completions/_sosappliance":        "-rw-r--r--",
				"./usr/share/fish/vendor_completions.d/sosappliance.fish": "-rw-r--r--",
				"./usr/share/man/man1/sosappliance.1.gz":                  "-rw-r--r--",
				"./usr/share/doc/sosappliance/copyright":                  "-rw-r--r--",
				"./usr/share/doc/sosappliance/changelog.gz":               "-rw-r--r--",
				"./usr/share/doc/sosappliance/changelog.Debian.gz":        "-rw-r--r--",
				"./usr/share/doc/sosappliance/third-party-licenses.gz":    "-rw-r--r--",
				"./usr/share/lintian/overrides/sosappliance":              "-rw-r--r--",
				"./usr/share/sosappliance/grafana-dashboard.json":         "-rw-r--r--",
				"./usr/share/sosappliance/prometheus-alerts.yml":          "-rw-r--r--",
			}
			listing := run(t, "dpkg-deb", "--contents", p.path)
			seen := map[string]bool{}
			for _, line := range strings.Split(strings.TrimSpace(listing), "\n") {
				f := strings.Fields(line)
				if len(f) != 6 {
					t.Errorf("unexpected listing line %q", line)
					continue
				}
				mode, owner, path := f[0], f[1], f[5]
				if owner != "root/root" {
					t.Errorf("%s is owned by %s", path, owner)
				}
				if want, ok := wantModes[path]; ok {
					seen[path] = true
					if mode != want {
						t.Errorf("%s has mode %s, want %s", path, mode, want)
					}
				} else if !strings.HasPrefix(mode, "d") {
					t.Errorf("unexpected file %s in the package", path)
				}
			}
			for path := range wantModes {
				if !seen[path] {
					t.Errorf("package lacks %s", path)
				}
			}

			if got := run(t, "dpkg-deb", "--info", p.path, "conffiles"); got != "/etc/sosappliance/sos.hcl\n" {
				t.Errorf("conffiles = %q, want only /etc/sosappliance/sos.hcl", got)
			}
			for _, script := range []string{"postinst", "prerm", "postrm"} {
				got := run(t, "dpkg-deb", "--info", p.path, script)
				if got != string(sourceFile(t, "packaging/scripts/deb/"+script)) {
					t.Errorf("%s in the package differs from packaging/scripts/deb/%s", script, script)
				}
				if m := startsOrEnables.FindString(withoutStartAgain(got)); m != "" {
					t.Errorf("%s starts or enables the service: %q", script, strings.TrimSpace(m))
				}
			}

			root := t.TempDir()
			run(t, "dpkg-deb", "--extract", p.path, root)
			checkExtractedDeb(t, root, p.arch, version)
		})
	}
}

func checkExtractedDeb(t *testing.T, root, arch, version string) {
	bin := filepath.Join(root, "usr/bin/sosappliance")
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	if ef.Machine != elfMachine[arch] {
		t.Errorf("%s binary is built for %v", arch, ef.Machine)
	}
	ef.Close()

	same := func(installed, source string) {
		got, err := os.ReadFile(filepath.Join(root, installed))
		if err != nil {
			t.Error(err)
			return
		}
		if !bytes.Equal(got, sourceFile(t, source)) {
			t.Errorf("%s differs from %s", installed, source)
		}
	}
	same("etc/sosappliance/sos.hcl", "sos.hcl.example")
	same("lib/systemd/system/sosappliance.service", "packaging/files/sosappliance.service")
	same("usr/share/doc/sosappliance/copyright", "packaging/files/copyright")
	same("usr/share/sosappliance/grafana-dashboard.json", "packaging/files/grafana-dashboard.json")
	same("usr/share/sosappliance/prometheus-alerts.yml", "packaging/files/prometheus-alerts.yml")
	if got := gunzip(t, filepath.Join(root, "usr/share/doc/sosappliance/changelog.gz")); !bytes.Equal(got, sourceFile(t, "CHANGELOG.md")) {
		t.Error("changelog.gz is not CHANGELOG.md")
	}
	debChangelog := gunzip(t, filepath.Join(root, "usr/share/doc/sosappliance/changelog.Debian.gz"))
	if !strings.HasPrefix(string(debChangelog), fmt.Sprintf("sosappliance (%s-1) ", version)) {
		t.Errorf("changelog.Debian does not start with this version:\n%s", debChangelog)
	}
	checkWithDpkg(t, string(debChangelog), nil)
	notices := string(gunzip(t, filepath.Join(root, "usr/share/doc/sosappliance/third-party-licenses.gz")))
	for _, want := range []string{"The Go standard library", "github.com/spf13/cobra", "github.com/hashicorp/hcl/v2"} {
		if !strings.Contains(notices, want) {
			t.Errorf("third-party-licenses lacks %s", want)
		}
	}

	for path, want := range map[string]string{
		"usr/share/bash-completion/completions/sosappliance":    "complete -o default -F __start_sosappliance sosappliance",
		"usr/share/zsh/vendor-completions/_sosappliance":        "#compdef sosappliance",
		"usr/share/fish/vendor_completions.d/sosappliance.fish": "complete -c sosappliance",
	} {
		got, err := os.ReadFile(filepath.Join(root, path))
		if err != nil {
			t.Error(err)
			continue
		}
		if !strings.Contains(string(got), want) {
			t.Errorf("%s lacks %q", path, want)
		}
	}

	if arch != runtime.GOARCH {
		return
	}
	// The host's own architecture can run: check the version stamp and that
	// the man page documents every command the binary has.
	if got := run(t, bin, "version"); got != "sosappliance "+version+"\n" {
		t.Errorf("version prints %q, want the package version %s", got, version)
	}
	testsupport.RequireBinaries(t, "man")
	page, warnings := renderMan(t, gunzip(t, filepath.Join(root, "usr/share/man/man1/sosappliance.1.gz")))
	if warnings != "" {
		t.Errorf("man --warnings complains about the man page:\n%s", warnings)
	}
	help, err := ParseHelp(run(t, bin, "--help"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range help.Commands {
		if c.Name == "help" || c.Name == "completion" {
			continue
		}
		if !strings.Contains(page, "sosappliance "+c.Name) {
			t.Errorf("man page does not document %q", c.Name)
		}
	}
	if !strings.Contains(page, "fail_mode=secure") || !strings.Contains(page, PSKPath) {
		t.Error("man page lacks the switch and file notes")
	}
}

func gunzip(t *testing.T, path string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return b
}

func TestRPMPackages(t *testing.T) {
	testsupport.RequireBinaries(t, "rpm")
	version, pkgs := builtPackages(t)
	rpmArch := map[string]string{"amd64": "x86_64", "arm64": "aarch64"}
	for _, p := range pkgs {
		if p.format != "rpm" {
			continue
		}
		t.Run(p.arch, func(t *testing.T) {
			if got := run(t, "rpm", "-K", "--nosignature", p.path); !strings.HasSuffix(got, "digests OK\n") {
				t.Errorf("rpm -K: %s", got)
			}
			info := run(t, "rpm", "-qpi", p.path)
			for _, want := range []string{"Name        : sosappliance", "Version     : " + version, "Release     : 1",
				"Architecture: " + rpmArch[p.arch], "License     : Apache-2.0", "URL         : " + homepage} {
				if !strings.Contains(info, want) {
					t.Errorf("rpm -qpi lacks %q:\n%s", want, info)
				}
			}

			var requires []string
			for _, r := range strings.Split(strings.TrimSpace(run(t, "rpm", "-qp", "--requires", p.path)), "\n") {
				if !strings.HasPrefix(r, "rpmlib(") {
					requires = append(requires, r)
				}
			}
			if strings.Join(requires, "\n") != "nftables\n(iproute or iproute2)" {
				t.Errorf("requires %q, want nftables and iproute (iproute2 on SUSE) only", requires)
			}

			// path: mode, config flag (1 = %config), doc flag, and the
			// digest to compare with the source.
			type entry struct{ mode, config, doc, digest string }
			dump := map[string]entry{}
			for _, line := range strings.Split(strings.TrimSpace(run(t, "rpm", "-qp", "--dump", p.path)), "\n") {
				f := strings.Fields(line)
				if len(f) < 11 || f[5] != "root" || f[6] != "root" {
					t.Errorf("unexpected dump line (owner must be root:root) %q", line)
					continue
				}
				dump[f[0]] = entry{mode: f[4], digest: f[3], config: f[7], doc: f[8]}
			}
			wantFiles := map[string]entry{
				"/usr/bin/sosappliance":                                  {mode: "0100755", config: "0", doc: "0"},
				"/usr/lib/systemd/system/sosappliance.service":           {mode: "0100644", config: "0", doc: "0"},
				"/etc/sosappliance":                                      {mode: "040755", config: "0", doc: "0"},
				"/etc/sosappliance/sos.hcl":                              {mode: "0100644", config: "1", doc: "0"},
				"/var/lib/sosappliance":                                  {mode: "040750", config: "0", doc: "0"},
				"/usr/share/bash-completion/completions/sosappliance":    {mode: "0100644", config: "0", doc: "0"},
				"/usr/share/zsh/site-functions/_sosappliance":            {mode: "0100644", config: "0", doc: "0"},
				"/usr/share/fish/vendor_completions.d/sosappliance.fish": {mode: "0100644", config: "0", doc: "0"},
				"/usr/share/man/man1/sosappliance.1.gz":                  {mode: "0100644", config: "0", doc: "0"},
				"/usr/share/licenses/sosappliance/LICENSE":               {mode: "0100644", config: "0", doc: "0"},
				"/usr/share/licenses/sosappliance/THIRD-PARTY-LICENSES":  {mode: "0100644", config: "0", doc: "0"},
				"/usr/share/doc/sosappliance/CHANGELOG.md":               {mode: "0100644", config: "0", doc: "1"},
				"/usr/share/sosappliance/grafana-dashboard.json":         {mode: "0100644", config: "0", doc: "0"},
				"/usr/share/sosappliance/prometheus-alerts.yml":          {mode: "0100644", config: "0", doc: "0"},
			}
			for path, want := range wantFiles {
				got, ok := dump[path]
				if !ok {
					t.Errorf("package lacks %s", path)
					continue
				}
				if got.mode != want.mode || got.config != want.config || got.doc != want.doc {
					t.Errorf("%s: mode %s config %s doc %s, want mode %s config %s doc %s",
						path, got.mode, got.config, got.doc, want.mode, want.config, want.doc)
				}
			}
			for path := range dump {
				if _, ok := wantFiles[path]; !ok {
					t.Errorf("unexpected file %s in the package", path)
				}
			}
			for installed, source := range map[string]string{
				"/etc/sosappliance/sos.hcl":                    "sos.hcl.example",
				"/usr/lib/systemd/system/sosappliance.service": "packaging/files/sosappliance.service",
				"/usr/share/licenses/sosappliance/LICENSE":     "LICENSE",
				"/usr/share/doc/sosappliance/CHANGELOG.md":     "CHANGELOG.md",
				DashboardPath: "packaging/files/grafana-dashboard.json",
				AlertsPath:    "packaging/files/prometheus-alerts.yml",
			} {
				sum := sha256.Sum256(sourceFile(t, source))
				if got := dump[installed].digest; got != hex.EncodeToString(sum[:]) {
					t.Errorf("%s in the package is not %s", installed, source)
				}
			}
			// %config(noreplace): an edited file survives upgrades.
			flags := run(t, "rpm", "-qp", "--qf", "[%{FILEFLAGS:fflags} %{FILENAMES}\n]", p.path)
			if !strings.Contains(flags, "cn /etc/sosappliance/sos.hcl\n") {
				t.Errorf("sos.hcl is not %%config(noreplace):\n%s", flags)
			}

			for tag, script := range map[string]string{"POSTIN": "post", "PREUN": "preun", "POSTUN": "postun"} {
				got := run(t, "rpm", "-qp", "--qf", "%{"+tag+"}", p.path)
				want := strings.TrimRight(string(sourceFile(t, "packaging/scripts/rpm/"+script)), "\n")
				if strings.TrimRight(got, "\n") != want {
					t.Errorf("%%%s scriptlet differs from packaging/scripts/rpm/%s:\n%s", strings.ToLower(tag), script, got)
				}
				if m := startsOrEnables.FindString(got); m != "" && script != "preun" {
					t.Errorf("%s starts or enables the service: %q", script, strings.TrimSpace(m))
				}
			}
			if pre := run(t, "rpm", "-qp", "--qf", "%{PREIN}", p.path); pre != "(none)" {
				t.Errorf("unexpected %%pre scriptlet: %q", pre)
			}
		})
	}
}

// TestLintian runs lintian on both .deb files: no errors allowed; what it
// still warns about is logged.
func TestLintian(t *testing.T) {
	testsupport.RequireBinaries(t, "lintian")
	_, pkgs := builtPackages(t)
	for _, p := range pkgs {
		if p.format != "deb" {
			continue
		}
		t.Run(p.arch, func(t *testing.T) {
			cmd := exec.Command("lintian", "--no-tag-display-limit", p.path)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if err != nil && !errors.As(err, &exit) {
				t.Fatalf("lintian: %v", err)
			}
			for _, line := range strings.Split(string(out), "\n") {
				switch {
				case strings.HasPrefix(line, "E: "):
					t.Errorf("lintian: %s", line)
				case strings.HasPrefix(line, "W: "), strings.HasPrefix(line, "I: "):
					t.Logf("lintian: %s", line)
				}
			}
			if err != nil && !strings.Contains(string(out), "E: ") {
				t.Errorf("lintian failed without reporting a tag: %v\n%s", err, out)
			}
		})
	}
}
