package packaging

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// describePattern splits `git describe --tags --always --dirty` output of a
// commit that has a tag somewhere in its history: TAG-COUNT-gSHA.
var describePattern = regexp.MustCompile(`^(.+)-([0-9]+)-g([0-9a-f]+)$`)

// upstreamVersionPattern is what both dpkg and rpm accept as an upstream
// version once we add a package revision: a leading digit, then
// alphanumerics and . + ~ only (no '-', which both use as the revision
// separator).
var upstreamVersionPattern = regexp.MustCompile(`^[0-9][A-Za-z0-9.+~]*$`)

// PackageVersion turns `git describe --tags --always --dirty` output into an
// upstream version that sorts correctly in both dpkg and rpm:
//
//	v1.2.3                 -> 1.2.3
//	v1.2.3-rc1             -> 1.2.3~rc1            (before 1.2.3)
//	v1.2.3-4-gabc1234      -> 1.2.3+git20250102.4.abc1234   (after 1.2.3)
//	abc1234 (no tag)       -> 0.0.0~git20250102093000.abc1234
//	any of them + "-dirty" -> the same with ".dirty" / "+dirty" appended
//
// committed is the commit time of HEAD; its UTC date makes snapshot versions
// of successive commits increase: after a tag with the commit count, before
// the first tag with the time of day too, in the same number (two commits
// of one day would otherwise sort by their hashes, and a time of its own
// would sort below an older build's hash of that day).
func PackageVersion(describe string, committed time.Time) (string, error) {
	d := strings.TrimSpace(describe)
	dirty := strings.HasSuffix(d, "-dirty")
	d = strings.TrimSuffix(d, "-dirty")
	if d == "" {
		return "", fmt.Errorf("empty git describe output")
	}
	date := committed.UTC().Format("20060102")

	var v string
	switch m := describePattern.FindStringSubmatch(d); {
	case m != nil:
		v = tagVersion(m[1]) + "+git" + date + "." + m[2] + "." + m[3]
	case isHex(d):
		v = "0.0.0~git" + committed.UTC().Format("20060102150405") + "." + d
	default:
		v = tagVersion(d)
	}
	if dirty {
		if strings.Contains(v, "git") {
			v += ".dirty"
		} else {
			v += "+dirty"
		}
	}
	if !upstreamVersionPattern.MatchString(v) {
		return "", fmt.Errorf("git describe %q gives %q, which is not a valid deb/rpm version (tags must look like v1.2.3 or v1.2.3-rc1)", describe, v)
	}
	return v, nil
}

// tagVersion drops the customary "v" and turns a semver pre-release
// separator into "~", which sorts before the release in dpkg and rpm.
func tagVersion(tag string) string {
	tag = strings.TrimPrefix(tag, "v")
	return strings.ReplaceAll(tag, "-", "~")
}

func isHex(s string) bool {
	for _, r := range s {
		if !strings.ContainsRune("0123456789abcdef", r) {
			return false
		}
	}
	return len(s) >= 4
}

// GitVersion reads the package version of the checkout at repoDir.
func GitVersion(ctx context.Context, repoDir string) (string, error) {
	describe, err := gitOutput(ctx, repoDir, "describe", "--tags", "--always", "--dirty")
	if err != nil {
		return "", err
	}
	committed, err := CommitTime(ctx, repoDir)
	if err != nil {
		return "", err
	}
	return PackageVersion(describe, committed)
}

// CommitTime is the commit time of HEAD, used as the build date of
// generated files so that rebuilding a commit gives the same man page and
// changelog.
func CommitTime(ctx context.Context, repoDir string) (time.Time, error) {
	stamp, err := gitOutput(ctx, repoDir, "log", "-1", "--format=%ct")
	if err != nil {
		return time.Time{}, err
	}
	secs, err := strconv.ParseInt(stamp, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("commit time %q: %w", stamp, err)
	}
	return time.Unix(secs, 0).UTC(), nil
}

func gitOutput(ctx context.Context, repoDir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = repoDir
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			stderr = strings.TrimSpace(string(ee.Stderr))
		}
		return "", fmt.Errorf("git %s: %w %s", strings.Join(args, " "), err, stderr)
	}
	return strings.TrimSpace(string(out)), nil
}
