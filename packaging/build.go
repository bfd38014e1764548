package packaging

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/goreleaser/nfpm/v2"
	_ "github.com/goreleaser/nfpm/v2/deb" // registers the deb packager
	"github.com/goreleaser/nfpm/v2/files"
	_ "github.com/goreleaser/nfpm/v2/rpm" // registers the rpm packager
)

// Package facts shared by both formats.
const (
	PackageName = "sosappliance"
	// Revision is the package revision appended to the upstream version
	// (deb "-1", rpm Release 1); the packages are built from upstream
	// sources only, so it only changes if the packaging alone is rebuilt.
	Revision          = "1"
	DefaultMaintainer = "sosappliance maintainers <maintainers@sosappliance.invalid>"
	homepage          = "https://github.com/sosappliance/sosappliance"
	summary           = "transparent TCP accelerator for long fat networks"
	// longDescription follows the Debian layout: a lone "." separates
	// paragraphs (rpm gets a blank line instead).
	longDescription = `sosappliance steers whitelisted TCP connections through OpenFlow switches
to local agents, which carry each connection over many parallel TCP
streams to the agent at the server's site. Clients and servers stay
unmodified; the server sees the client's own address.
.
Every node runs the same binary with the same declarative HCL file and
converges to it: host tuning, TPROXY steering rules, OpenFlow flows and
relay listeners. The package does not start the service; edit
/etc/sosappliance/sos.hcl first.`
)

// Installed paths the tests and the scripts rely on.
const (
	BinaryPath = "/usr/bin/sosappliance"
	ConfigDir  = "/etc/sosappliance"
	ConfigPath = "/etc/sosappliance/sos.hcl"
	PSKPath    = "/etc/sosappliance/psk"
	StateDir   = "/var/lib/sosappliance"
	ManPath    = "/usr/share/man/man1/sosappliance.1.gz"
	// The Grafana dashboard and the Prometheus alerting rules, for the
	// monitoring server to load; their series are tested against a
	// running daemon's scrape.
	DashboardPath = "/usr/share/sosappliance/grafana-dashboard.json"
	AlertsPath    = "/usr/share/sosappliance/prometheus-alerts.yml"
)

// Dependencies of the installed package: nft and ip are what the steering
// executor drives. On rpm the iproute2 package is called "iproute" on
// Fedora/RHEL and "iproute2" on SUSE, hence a rich dependency.
var (
	debDepends = []string{"nftables", "iproute2"}
	rpmDepends = []string{"nftables", "(iproute or iproute2)"}
)

// Options say what to build and where.
type Options struct {
	RepoDir    string   // root of the source checkout
	OutDir     string   // where the packages are written; created if missing
	Version    string   // upstream version; read from git when empty
	Arches     []string // GOARCH values; amd64 and arm64 when empty
	Formats    []string // "deb", "rpm"; both when empty
	Maintainer string   // DefaultMaintainer when empty
	Log        io.Writer
}

// Build cross-compiles the binary and writes one package per format and
// architecture into OutDir, returning their paths.
func Build(ctx context.Context, o Options) ([]string, error) {
	if o.RepoDir == "" {
		o.RepoDir = "."
	}
	if len(o.Arches) == 0 {
		o.Arches = []string{"amd64", "arm64"}
	}
	if len(o.Formats) == 0 {
		o.Formats = []string{"deb", "rpm"}
	}
	if o.Maintainer == "" {
		o.Maintainer = DefaultMaintainer
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	for _, f := range o.Formats {
		if f != "deb" && f != "rpm" {
			return nil, fmt.Errorf("unknown package format %q (want deb or rpm)", f)
		}
	}
	repo, err := filepath.Abs(o.RepoDir)
	if err != nil {
		return nil, fmt.Errorf("repository path: %w", err)
	}

	built, err := buildTime(ctx, repo)
	if err != nil {
		return nil, err
	}
	if o.Version == "" {
		if o.Version, err = GitVersion(ctx, repo); err != nil {
			return nil, fmt.Errorf("version from git (pass a version when building outside a checkout): %w", err)
		}
	}
	if !upstreamVersionPattern.MatchString(o.Version) {
		return nil, fmt.Errorf("version %q is not a valid deb/rpm upstream version", o.Version)
	}

	work, err := os.MkdirTemp("", "mkpkg-")
	if err != nil {
		return nil, fmt.Errorf("work directory: %w", err)
	}
	defer os.RemoveAll(work)

	binaries := map[string]string{}
	for _, arch := range o.Arches {
		fmt.Fprintf(o.Log, "mkpkg: building %s for linux/%s\n", PackageName, arch)
		bin := filepath.Join(work, arch, PackageName)
		if err := goBuild(ctx, repo, "linux", arch, o.Version, bin); err != nil {
			return nil, err
		}
		binaries[arch] = bin
	}
	host, ok := binaries[runtime.GOARCH]
	if !ok || runtime.GOOS != "linux" {
		host = filepath.Join(work, "host", PackageName)
		if err := goBuild(ctx, repo, runtime.GOOS, runtime.GOARCH, o.Version, host); err != nil {
			return nil, err
		}
	}

	gen := filepath.Join(work, "gen")
	if err := generateDocs(ctx, repo, host, gen, o.Version, o.Maintainer, built); err != nil {
		return nil, err
	}

	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return nil, fmt.Errorf("output directory: %w", err)
	}
	var out []string
	for _, arch := range o.Arches {
		third := filepath.Join(work, arch, "third-party-licenses")
		if err := writeThirdPartyLicenses(ctx, binaries[arch], third); err != nil {
			return nil, err
		}
		for _, format := range o.Formats {
			info := packageInfo(format, arch, o.Version, o.Maintainer, built, repo, binaries[arch], gen, third)
			path, err := writePackage(format, info, o.OutDir)
			if err != nil {
				return nil, fmt.Errorf("%s %s package: %w", format, arch, err)
			}
			fmt.Fprintf(o.Log, "mkpkg: wrote %s\n", path)
			out = append(out, path)
		}
	}
	return out, nil
}

// buildTime is the date stamped into generated files: SOURCE_DATE_EPOCH
// when set (reproducible-builds convention), else the commit time of HEAD,
// so that rebuilding one commit gives the same packages.
func buildTime(ctx context.Context, repo string) (time.Time, error) {
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		var secs int64
		if _, err := fmt.Sscan(s, &secs); err != nil {
			return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", s, err)
		}
		return time.Unix(secs, 0).UTC(), nil
	}
	t, err := CommitTime(ctx, repo)
	if err != nil {
		return time.Time{}, fmt.Errorf("build date from git (or set SOURCE_DATE_EPOCH): %w", err)
	}
	return t, nil
}

func goBuild(ctx context.Context, repo, goos, goarch, version, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildmode=pie",
		"-ldflags", "-s -w -X main.version="+version,
		"-o", out, "./cmd/sosappliance")
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build for %s/%s: %w\n%s", goos, goarch, err, stderr.String())
	}
	return nil
}

// generateDocs writes the shell completions, the man page and both
// changelogs into dir.
func generateDocs(ctx context.Context, repo, host, dir, version, maintainer string, built time.Time) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("generated files directory: %w", err)
	}
	for _, shell := range []string{"bash", "zsh", "fish"} {
		script, err := runHelp(ctx, host, "completion", shell)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "completion."+shell), []byte(script), 0o644); err != nil {
			return fmt.Errorf("write %s completion: %w", shell, err)
		}
	}

	help := func(args ...string) (string, error) { return runHelp(ctx, host, args...) }
	page, err := CrawlManPage(help, PackageName, summary, version, built)
	if err != nil {
		return err
	}
	page.Extra = manExtras
	if err := writeGzip(filepath.Join(dir, "sosappliance.1.gz"), []byte(page.Roff())); err != nil {
		return err
	}

	md, err := os.ReadFile(filepath.Join(repo, "CHANGELOG.md"))
	if err != nil {
		return fmt.Errorf("changelog: %w", err)
	}
	releases, err := ParseChangelog(string(md))
	if err != nil {
		return fmt.Errorf("CHANGELOG.md: %w", err)
	}
	if err := writeGzip(filepath.Join(dir, "changelog.gz"), md); err != nil {
		return err
	}
	deb := DebianChangelog(PackageName, version, Revision, maintainer, built, releases)
	return writeGzip(filepath.Join(dir, "changelog.Debian.gz"), []byte(deb))
}

// CrawlManPage reads `--help` of every command reachable from the root
// through help (which runs the CLI with the given arguments). completion and
// help are listed by the root but not documented one by one: their text is
// about shells, not the appliance.
func CrawlManPage(help func(args ...string) (string, error), name, summary, version string, built time.Time) (ManPage, error) {
	rootText, err := help("--help")
	if err != nil {
		return ManPage{}, err
	}
	root, err := ParseHelp(rootText)
	if err != nil {
		return ManPage{}, fmt.Errorf("parse %s --help: %w", name, err)
	}
	page := ManPage{
		Name:    name,
		Summary: summary,
		Version: version,
		Date:    built,
		Root:    root,
	}
	var crawl func(path []string, entries []HelpEntry) error
	crawl = func(path []string, entries []HelpEntry) error {
		if len(path) > 4 {
			return fmt.Errorf("command tree under %q is deeper than 4 levels", strings.Join(path, " "))
		}
		for _, e := range entries {
			if e.Name == "help" || (len(path) == 0 && e.Name == "completion") {
				continue
			}
			args := append(slices.Clone(path), e.Name, "--help")
			text, err := help(args...)
			if err != nil {
				return err
			}
			h, err := ParseHelp(text)
			if err != nil {
				return fmt.Errorf("parse %s %s: %w", name, strings.Join(args, " "), err)
			}
			h.Short = e.Text
			page.Commands = append(page.Commands, h)
			if err := crawl(append(slices.Clone(path), e.Name), h.Commands); err != nil {
				return err
			}
		}
		return nil
	}
	if err := crawl(nil, root.Commands); err != nil {
		return ManPage{}, err
	}
	return page, nil
}

var manExtras = []ManSection{
	{
		Title: "Files",
		Entries: []HelpEntry{
			{Name: ConfigPath, Text: "The deployment, identical on every node. The package installs an example; the service is not started until you have made it yours."},
			{Name: PSKPath, Text: "The pre-shared key that authenticates the stripe streams between agents: 64 hexadecimal digits, mode 0600, created at installation. Copy the same file to every agent."},
			{Name: StateDir, Text: "The state store: applied items, the values they replaced (for rollback) and the apply history; and, per agent, the sessions it founded in the last minutes (founded-<agent>), so that a restarted agent never founds one of them twice."},
			{Name: "/run/sosappliance/control.sock", Text: "The running daemon's control socket, used by the status command."},
		},
	},
	{
		Title: "Shell completion",
		Text:  "Completions for bash, zsh and fish are installed with the package. sosappliance completion bash|zsh|fish prints them again.",
	},
	{
		Title: "Switches",
		Text:  "Each OpenFlow 1.3 switch connects to the controller node. Set fail_mode=secure so the steering flows survive a controller restart, and keep the switch's own normal forwarding (hybrid mode) for the traffic that is not steered.",
	},
	{
		Title: "Exit status",
		Text:  "0 on success, 1 on an error or an invalid configuration. plan can also exit with 2 to say that there are changes; see its options.",
	},
	{
		Title: "See also",
		Text:  "systemctl(1), nft(8), ip(8), ovs-vsctl(8)",
	},
}

func runHelp(ctx context.Context, bin string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C", "COLUMNS=80")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w\n%s", PackageName, strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}

// writeGzip compresses at the highest level and without a name or time in
// the header, as Debian policy asks for man pages and changelogs.
func writeGzip(path string, data []byte) error {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return err
	}
	if _, err := zw.Write(data); err != nil {
		return fmt.Errorf("compress %s: %w", filepath.Base(path), err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("compress %s: %w", filepath.Base(path), err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	return nil
}

func packageInfo(format, arch, version, maintainer string, built time.Time, repo, bin, gen, thirdParty string) *nfpm.Info {
	src := func(p string) string { return filepath.Join(repo, "packaging", p) }
	file := func(source, dest string, mode os.FileMode) *files.Content {
		return &files.Content{Source: source, Destination: dest, FileInfo: &files.ContentFileInfo{Mode: mode}}
	}
	dir := func(dest string, mode os.FileMode) *files.Content {
		return &files.Content{Destination: dest, Type: files.TypeDir, FileInfo: &files.ContentFileInfo{Mode: mode}}
	}

	contents := files.Contents{
		file(bin, BinaryPath, 0o755),
		dir(ConfigDir, 0o755),
		dir(StateDir, 0o750),
		file(filepath.Join(gen, "completion.bash"), "/usr/share/bash-completion/completions/sosappliance", 0o644),
		file(filepath.Join(gen, "completion.fish"), "/usr/share/fish/vendor_completions.d/sosappliance.fish", 0o644),
		file(filepath.Join(gen, "sosappliance.1.gz"), ManPath, 0o644),
		file(src("files/grafana-dashboard.json"), DashboardPath, 0o644),
		file(src("files/prometheus-alerts.yml"), AlertsPath, 0o644),
	}
	config := file(filepath.Join(repo, "sos.hcl.example"), ConfigPath, 0o644)
	info := &nfpm.Info{
		Name:          PackageName,
		Arch:          arch,
		Platform:      "linux",
		Version:       version,
		VersionSchema: "none",
		Release:       Revision,
		Section:       "net",
		Priority:      "optional",
		Maintainer:    maintainer,
		Vendor:        "The sosappliance authors",
		Homepage:      homepage,
		License:       "Apache-2.0",
		Description:   summary + "\n" + longDescription,
		MTime:         built,
	}
	switch format {
	case "deb":
		config.Type = files.TypeConfig
		contents = append(contents,
			config,
			file(src("files/sosappliance.service"), "/lib/systemd/system/sosappliance.service", 0o644),
			file(filepath.Join(gen, "completion.zsh"), "/usr/share/zsh/vendor-completions/_sosappliance", 0o644),
			file(src("files/copyright"), "/usr/share/doc/sosappliance/copyright", 0o644),
			file(filepath.Join(gen, "changelog.gz"), "/usr/share/doc/sosappliance/changelog.gz", 0o644),
			file(filepath.Join(gen, "changelog.Debian.gz"), "/usr/share/doc/sosappliance/changelog.Debian.gz", 0o644),
			file(thirdParty+".gz", "/usr/share/doc/sosappliance/third-party-licenses.gz", 0o644),
			file(src("files/lintian-overrides"), "/usr/share/lintian/overrides/sosappliance", 0o644),
		)
		info.Depends = debDepends
		info.Scripts = nfpm.Scripts{
			PostInstall: src("scripts/deb/postinst"),
			PreRemove:   src("scripts/deb/prerm"),
			PostRemove:  src("scripts/deb/postrm"),
		}
		info.Deb.Compression = "xz"
	case "rpm":
		config.Type = files.TypeConfigNoReplace
		license := file(filepath.Join(repo, "LICENSE"), "/usr/share/licenses/sosappliance/LICENSE", 0o644)
		license.Type = files.TypeRPMLicense
		third := file(thirdParty, "/usr/share/licenses/sosappliance/THIRD-PARTY-LICENSES", 0o644)
		third.Type = files.TypeRPMLicense
		changelog := file(filepath.Join(repo, "CHANGELOG.md"), "/usr/share/doc/sosappliance/CHANGELOG.md", 0o644)
		changelog.Type = files.TypeRPMDoc
		contents = append(contents,
			config,
			file(src("files/sosappliance.service"), "/usr/lib/systemd/system/sosappliance.service", 0o644),
			file(filepath.Join(gen, "completion.zsh"), "/usr/share/zsh/site-functions/_sosappliance", 0o644),
			license, third, changelog,
		)
		info.Depends = rpmDepends
		info.Scripts = nfpm.Scripts{
			PostInstall: src("scripts/rpm/post"),
			PreRemove:   src("scripts/rpm/preun"),
			PostRemove:  src("scripts/rpm/postun"),
		}
		info.RPM.Summary = summary
		info.Description = strings.ReplaceAll(longDescription, "\n.\n", "\n\n")
		info.RPM.Group = "System Environment/Daemons"
		info.RPM.Compression = "xz"
		info.RPM.BuildHost = "sosappliance-mkpkg"
	}
	info.Contents = contents
	return info
}

func writePackage(format string, info *nfpm.Info, outDir string) (string, error) {
	packager, err := nfpm.Get(format)
	if err != nil {
		return "", err
	}
	info = nfpm.WithDefaults(info)
	if err := nfpm.Validate(info); err != nil {
		return "", err
	}
	path := filepath.Join(outDir, packager.ConventionalFileName(info))
	tmp, err := os.CreateTemp(outDir, ".mkpkg-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	if err := packager.Package(info, tmp); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return "", err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", fmt.Errorf("move package into place: %w", err)
	}
	return path, nil
}
