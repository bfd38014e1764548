package packaging

import (
	"context"
	"debug/buildinfo"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"unicode"
)

// writeThirdPartyLicenses collects the license texts of the Go toolchain and
// of every module linked into bin. The binary is static, so the notices that
// the BSD, MIT and Apache licenses ask binary distributions to carry have to
// ship beside it. The file is written plain to out and compressed to out.gz.
func writeThirdPartyLicenses(ctx context.Context, bin, out string) error {
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		return fmt.Errorf("read build info of %s: %w", bin, err)
	}
	modCache, err := goEnv(ctx, "GOMODCACHE")
	if err != nil {
		return err
	}
	goRoot, err := goEnv(ctx, "GOROOT")
	if err != nil {
		return err
	}

	var b strings.Builder
	b.WriteString("Licenses of the third-party code linked into /usr/bin/sosappliance.\n")
	b.WriteString("The sosappliance code itself is under the Apache License 2.0 (see copyright).\n")

	goLicense, err := os.ReadFile(filepath.Join(goRoot, "LICENSE"))
	if err != nil {
		return fmt.Errorf("Go license: %w", err)
	}
	writeNotice(&b, "The Go standard library and runtime ("+bi.GoVersion+")", [][]byte{goLicense})

	for _, dep := range bi.Deps {
		mod := dep
		if dep.Replace != nil {
			mod = dep.Replace
		}
		dir := filepath.Join(modCache, escapeModulePath(mod.Path)+"@"+mod.Version)
		texts, err := licenseTexts(dir)
		if err != nil {
			return fmt.Errorf("licenses of %s@%s: %w", mod.Path, mod.Version, err)
		}
		writeNotice(&b, mod.Path+" "+mod.Version, texts)
	}

	if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("write third-party licenses: %w", err)
	}
	return writeGzip(out+".gz", []byte(b.String()))
}

func writeNotice(b *strings.Builder, title string, texts [][]byte) {
	b.WriteString("\n")
	b.WriteString(strings.Repeat("=", 78) + "\n")
	b.WriteString(title + "\n")
	b.WriteString(strings.Repeat("=", 78) + "\n\n")
	for _, t := range texts {
		b.Write(t)
		if len(t) > 0 && t[len(t)-1] != '\n' {
			b.WriteString("\n")
		}
	}
}

// licenseTexts reads the license and notice files at the top of a module.
// A module without one is an error: shipping its code without its terms is
// not something a package build should do quietly.
func licenseTexts(dir string) ([][]byte, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		upper := strings.ToUpper(e.Name())
		if e.Type().IsRegular() && (strings.HasPrefix(upper, "LICENSE") || strings.HasPrefix(upper, "LICENCE") ||
			strings.HasPrefix(upper, "COPYING") || strings.HasPrefix(upper, "NOTICE")) {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("no LICENSE, COPYING or NOTICE file in %s", dir)
	}
	slices.Sort(names)
	var texts [][]byte
	for _, n := range names {
		t, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			return nil, err
		}
		texts = append(texts, t)
	}
	return texts, nil
}

// escapeModulePath applies the module cache's case encoding: an upper-case
// letter is stored as '!' and its lower-case form.
func escapeModulePath(path string) string {
	var b strings.Builder
	for _, r := range path {
		if unicode.IsUpper(r) {
			b.WriteByte('!')
			b.WriteRune(unicode.ToLower(r))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func goEnv(ctx context.Context, name string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", name).Output()
	if err != nil {
		return "", fmt.Errorf("go env %s: %w", name, err)
	}
	v := strings.TrimSpace(string(out))
	if v == "" {
		return "", fmt.Errorf("go env %s is empty", name)
	}
	return v, nil
}
