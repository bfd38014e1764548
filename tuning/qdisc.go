package tuning

import (
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// keyDefaultQdisc is checked against the qdiscs the kernel has, because the
// kernel refuses an unknown one only at write time (ENOENT), after a plan
// promised it.
const keyDefaultQdisc = "net.core.default_qdisc"

// checkQdisc tells whether the kernel can provide the queueing discipline
// name, by what it says of itself without changing anything: the current
// default, the build configuration in /proc/config.gz, a loaded sch_NAME
// module, or sch_NAME in the module lists under /lib/modules. A kernel
// that says nothing either way is taken not to have it: the error says
// what was looked at.
func (s *Sysctl) checkQdisc(name string) error {
	if current, err := s.read(keyDefaultQdisc); err == nil && current == name {
		return nil
	}
	if name == "pfifo_fast" {
		// Built into every kernel: the one default that needs no option.
		return nil
	}
	option := "CONFIG_NET_SCH_" + strings.ToUpper(name)
	switch value, err := kernelConfig(filepath.Join(s.Root, "proc", "config.gz"), option); {
	case err == nil && (value == "y" || value == "m"):
		return nil
	case err == nil:
		return fmt.Errorf("%s = %q: the kernel has no %s qdisc (%s is not set in /proc/config.gz)", keyDefaultQdisc, name, name, option)
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s = %q: %w", keyDefaultQdisc, name, err)
	}
	module := "sch_" + name
	if _, err := os.Stat(filepath.Join(s.Root, "sys", "module", module)); err == nil {
		return nil
	}
	release, err := s.read("kernel.osrelease")
	if err != nil {
		return fmt.Errorf("%s = %q: %w", keyDefaultQdisc, name, err)
	}
	dir := filepath.Join(s.Root, "lib", "modules", release)
	for _, list := range []string{"modules.builtin", "modules.dep"} {
		if found, err := listsModule(filepath.Join(dir, list), module+".ko"); err == nil && found {
			return nil
		}
	}
	return fmt.Errorf("%s = %q: the kernel shows no %s qdisc (no /proc/config.gz, no /sys/module/%s, not in %s)",
		keyDefaultQdisc, name, name, module, dir)
}

// kernelConfig returns option's value in a gzipped kernel config: "y",
// "m", a string, or "" for "# OPTION is not set" and options not listed.
func kernelConfig(path, option string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	defer z.Close()
	sc := bufio.NewScanner(z)
	for sc.Scan() {
		if value, ok := strings.CutPrefix(sc.Text(), option+"="); ok {
			return value, nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return "", nil
}

// listsModule reports whether a modules.builtin or modules.dep file names
// the module file ("kernel/net/sched/sch_fq.ko" or "...ko.xz:" in
// modules.dep).
func listsModule(path, file string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, _, _ := strings.Cut(sc.Text(), ":")
		if base := filepath.Base(name); base == file || strings.HasPrefix(base, file+".") {
			return true, nil
		}
	}
	return false, sc.Err()
}
