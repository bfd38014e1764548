package packaging

import (
	"bufio"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Release is one "## [VERSION] - DATE" section of CHANGELOG.md (Keep a
// Changelog format). The "Unreleased" section has an empty Version.
type Release struct {
	Version string
	Date    time.Time // zero for Unreleased or when the heading has no date
	Changes []string
}

var releaseHeading = regexp.MustCompile(`^##\s+\[?([^\]\s]+)\]?(?:\s+-\s+(\d{4}-\d{2}-\d{2}))?\s*$`)

// ParseChangelog reads the release sections of a Keep a Changelog file.
// Each list item becomes one change, prefixed with its "### Added" style
// category so the Debian changelog keeps that meaning.
func ParseChangelog(markdown string) ([]Release, error) {
	var releases []Release
	category := ""
	sc := bufio.NewScanner(strings.NewReader(markdown))
	lineNo := 0
	for sc.Scan() {
		lineNo++
		l := strings.TrimRight(sc.Text(), " \t")
		switch {
		case strings.HasPrefix(l, "## "):
			m := releaseHeading.FindStringSubmatch(l)
			if m == nil {
				return nil, fmt.Errorf("line %d: release heading %q is not \"## [VERSION] - YYYY-MM-DD\"", lineNo, l)
			}
			r := Release{Version: m[1]}
			if strings.EqualFold(r.Version, "unreleased") {
				r.Version = ""
			}
			if m[2] != "" {
				d, err := time.Parse("2006-01-02", m[2])
				if err != nil {
					return nil, fmt.Errorf("line %d: %w", lineNo, err)
				}
				r.Date = d
			}
			releases = append(releases, r)
			category = ""
		case strings.HasPrefix(l, "### "):
			category = strings.TrimSpace(strings.TrimPrefix(l, "### "))
		case len(releases) == 0:
			// The preamble before the first release is not a change.
		case strings.HasPrefix(l, "- ") || strings.HasPrefix(l, "* "):
			note := strings.TrimSpace(l[2:])
			if category != "" {
				note = category + ": " + note
			}
			r := &releases[len(releases)-1]
			r.Changes = append(r.Changes, note)
		case strings.HasPrefix(l, " ") && strings.TrimSpace(l) != "":
			r := &releases[len(releases)-1]
			if len(r.Changes) > 0 {
				r.Changes[len(r.Changes)-1] += " " + strings.TrimSpace(l)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return releases, nil
}

// DebianChangelog writes debian/changelog format (deb-changelog(5)) for the
// binary package. The first entry is the package being built: the
// Unreleased section if there is one, the release section of the same
// version, or a snapshot note. Older releases follow with revision "-1".
func DebianChangelog(pkg, upstream, revision, maintainer string, built time.Time, releases []Release) string {
	type entry struct {
		version string
		date    time.Time
		changes []string
	}
	snapshot := fmt.Sprintf("Snapshot build %s; the upstream changelog is changelog.gz.", upstream)
	var entries []entry
	rest := releases
	if len(rest) > 1 && rest[0].Version == "" && tagVersion(rest[1].Version) == upstream {
		// A build of a release whose changelog keeps an Unreleased
		// heading on top (empty right after a release, as Keep a
		// Changelog has it): the release heads the log.
		rest = rest[1:]
	}
	switch {
	case len(rest) > 0 && rest[0].Version == "":
		changes := rest[0].Changes
		if len(changes) == 0 {
			changes = []string{snapshot}
		}
		entries = append(entries, entry{upstream + "-" + revision, built, changes})
		rest = rest[1:]
	case len(rest) > 0 && tagVersion(rest[0].Version) == upstream:
		// Released: the section of this version heads the log as below.
	default:
		entries = append(entries, entry{upstream + "-" + revision, built, []string{snapshot}})
	}
	for _, r := range rest {
		date := r.Date
		if date.IsZero() {
			date = built
		}
		changes := r.Changes
		if len(changes) == 0 {
			changes = []string{"Release " + r.Version + "."}
		}
		entries = append(entries, entry{tagVersion(r.Version) + "-" + revision, date, changes})
	}

	var b strings.Builder
	for i, e := range entries {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "%s (%s) unstable; urgency=medium\n\n", pkg, e.version)
		for _, c := range e.changes {
			for j, l := range wrapWords(c, 76) {
				if j == 0 {
					fmt.Fprintf(&b, "  * %s\n", l)
				} else {
					fmt.Fprintf(&b, "    %s\n", l)
				}
			}
		}
		fmt.Fprintf(&b, "\n -- %s  %s\n", maintainer, e.date.UTC().Format("Mon, 02 Jan 2006 15:04:05 -0700"))
	}
	return b.String()
}

// wrapWords breaks text into lines of at most width bytes where it can
// (a single longer word stays whole).
func wrapWords(text string, width int) []string {
	var lines []string
	cur := ""
	for _, w := range strings.Fields(text) {
		switch {
		case cur == "":
			cur = w
		case len(cur)+1+len(w) <= width:
			cur += " " + w
		default:
			lines = append(lines, cur)
			cur = w
		}
	}
	if cur != "" {
		lines = append(lines, cur)
	}
	return lines
}
