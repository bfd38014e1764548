package tuning

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sosappliance/sosappliance/host/item"
)

// keyCongestionControl is checked against the available algorithms before it
// is planned, because the kernel rejects an unknown name only at write time.
const keyCongestionControl = "net.ipv4.tcp_congestion_control"

// Sysctl converges kernel parameters under Root/proc/sys. Keys use sysctl(8)
// spelling: dots separate levels and a "/" stands for a dot inside one level
// ("net.ipv4.conf.eth1/100.rp_filter").
type Sysctl struct {
	Root string
	// Modprobe is the command run, with "tcp_<name>" appended, when a
	// congestion control is not yet available.
	Modprobe []string

	mu    sync.Mutex
	tried map[string]error // module name -> outcome of the one modprobe attempt
}

// NewSysctl returns the sysctl executor for the host tree at root ("/" in
// production).
func NewSysctl(root string) *Sysctl {
	return &Sysctl{Root: root, Modprobe: []string{"modprobe"}}
}

// Kind implements Executor.
func (s *Sysctl) Kind() string { return item.KindSysctl }

func (s *Sysctl) path(key string) (string, error) {
	if key == "" {
		return "", errors.New("empty sysctl key")
	}
	parts := strings.Split(key, ".")
	for i, p := range parts {
		p = strings.ReplaceAll(p, "/", ".")
		if p == "" || p == "." || p == ".." {
			return "", fmt.Errorf("sysctl key %q is malformed", key)
		}
		parts[i] = p
	}
	return filepath.Join(s.Root, "proc", "sys", filepath.Join(parts...)), nil
}

// Observe reads each key; a key that does not exist is reported not present.
func (s *Sysctl) Observe(ctx context.Context, items []item.Item) ([]item.Observation, error) {
	var errs []error
	obs := make([]item.Observation, 0, len(items))
	for _, it := range items {
		o := item.Observation{Item: item.Item{Kind: it.Kind, Key: it.Key}}
		value, err := s.read(it.Key)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			errs = append(errs, err)
		default:
			o.Present, o.Value = true, value
		}
		obs = append(obs, o)
	}
	return obs, errors.Join(errs...)
}

func (s *Sysctl) read(key string) (string, error) {
	p, err := s.path(key)
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return "", fmt.Errorf("read sysctl %s: %w", key, err)
	}
	return item.CanonicalSysctlValue(string(b)), nil
}

// Gone reports a per-interface parameter whose interface's directory is
// not there (GoneChecker).
func (s *Sysctl) Gone(ctx context.Context, it item.Item) error {
	if !perInterface(it.Key) {
		return nil
	}
	p, err := s.path(it.Key)
	if err != nil {
		return nil
	}
	if _, err := os.Stat(filepath.Dir(p)); errors.Is(err, fs.ErrNotExist) {
		return gone(filepath.Base(filepath.Dir(p)), fmt.Errorf("sysctl %s does not exist on this node (no %s)", it.Key, filepath.Dir(p)))
	}
	return nil
}

// Validate rejects keys that do not exist on this node and congestion
// controls and default qdiscs the kernel cannot provide, naming every bad
// item at once.
func (s *Sysctl) Validate(ctx context.Context, items []item.Item) error {
	var errs []error
	for _, it := range items {
		p, err := s.path(it.Key)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		st, err := os.Stat(p)
		if errors.Is(err, fs.ErrNotExist) {
			err := fmt.Errorf("sysctl %s does not exist on this node (no %s)", it.Key, p)
			if perInterface(it.Key) {
				// The interface went away, not the parameter.
				if _, derr := os.Stat(filepath.Dir(p)); errors.Is(derr, fs.ErrNotExist) {
					err = gone(filepath.Base(filepath.Dir(p)), err)
				}
			}
			errs = append(errs, err)
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("sysctl %s: %w", it.Key, err))
			continue
		}
		if st.IsDir() {
			errs = append(errs, fmt.Errorf("sysctl %s is a directory of parameters, not a parameter", it.Key))
			continue
		}
		if item.CanonicalSysctlValue(it.Value) == "" {
			errs = append(errs, fmt.Errorf("sysctl %s: empty value", it.Key))
			continue
		}
		if err := s.checkDecimal(it); err != nil {
			errs = append(errs, err)
			continue
		}
		if it.Key == keyCongestionControl {
			if err := s.ensureCongestionControl(ctx, item.CanonicalSysctlValue(it.Value)); err != nil {
				errs = append(errs, err)
			}
		}
		if it.Key == keyDefaultQdisc {
			if err := s.checkQdisc(item.CanonicalSysctlValue(it.Value)); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// checkDecimal refuses, for a parameter whose value is integers, an
// integer written otherwise than in plain decimal (a base prefix, leading
// zeros, a sign, underscores): the kernel reads it in its own way (0x1e as
// 30, 017 as 15) and reports it in decimal, so Apply would change the
// host and then find it different from what it wrote, at every
// convergence. It refuses there too what the kernel refuses outright: a
// size with a unit ("64MiB", as sos.hcl writes sizes elsewhere) and
// fields joined by commas.
func (s *Sysctl) checkDecimal(it item.Item) error {
	var odd, huge, units []string
	commas := false
	desired := strings.Fields(it.Value)
	for _, f := range desired {
		if n, ok := withUnit(f); ok {
			units = append(units, fmt.Sprintf("%s (%d)", f, n))
			continue
		}
		// "4096,87380,33554432" for three fields, "4096, 87380", "4,096":
		// the kernel reads no comma in an integer. A list of its own
		// (ip_local_reserved_ports) or a CPU bitmap (rps_default_mask)
		// takes them, and may show one integer.
		commas = commas || strings.Contains(f, ",") && !takesCommas(it.Key)
		if digits := strings.TrimPrefix(f, "-"); digits != "" && strings.Trim(digits, "0123456789") == "" {
			if _, err := strconv.ParseInt(f, 10, 64); errors.Is(err, strconv.ErrRange) {
				if _, err := strconv.ParseUint(f, 10, 64); errors.Is(err, strconv.ErrRange) || f[0] == '-' {
					// No parameter's integer is wider than 64 bits:
					// the kernel refuses it at apply (refused below
					// only where the kernel shows integers).
					huge = append(huge, f)
					continue
				}
			}
		}
		// An integer Go reads the way the kernel does (base prefixes,
		// a leading 0 for octal, a sign, underscores) whose decimal
		// spelling is another, or digits behind a leading 0 that are
		// no octal ("087380": the kernel refuses it, maybe after
		// taking the fields before it). "30000-32767" (a range) is no
		// integer.
		n, err := strconv.ParseInt(f, 0, 64)
		u, uerr := strconv.ParseUint(f, 0, 64) // past int64 (kernel.shmmax)
		unsigned := strings.TrimLeft(f, "+-")
		if err == nil && strconv.FormatInt(n, 10) != f || err != nil && uerr == nil && strconv.FormatUint(u, 10) != f ||
			len(unsigned) > 1 && unsigned[0] == '0' && strings.Trim(unsigned, "0123456789") == "" && len(f)-len(unsigned) <= 1 {
			odd = append(odd, f)
		}
	}
	if len(odd) == 0 && len(huge) == 0 && len(units) == 0 && !commas {
		return nil
	}
	current, err := s.read(it.Key)
	if err != nil {
		return nil // Apply says what is wrong
	}
	// Only a parameter the kernel shows as plain decimal integers: not
	// one it shows as text, as ranges, or as zero-padded hex bitmaps
	// (rps_default_mask reads "00", and takes "03").
	fields := strings.Fields(current)
	if len(fields) == 0 {
		return nil
	}
	for _, f := range fields {
		n, err := strconv.ParseInt(f, 10, 64)
		u, uerr := strconv.ParseUint(f, 10, 64)
		if (err != nil || strconv.FormatInt(n, 10) != f) && (uerr != nil || strconv.FormatUint(u, 10) != f) {
			return nil
		}
	}
	switch {
	case len(units) > 0:
		return fmt.Errorf("sysctl %s = %q: the kernel takes plain numbers, not units: write %s as the number in brackets (now %q)",
			it.Key, it.Value, strings.Join(units, ", "), current)
	case commas:
		return fmt.Errorf("sysctl %s = %q: the kernel takes no commas here: write each number without separators, fields apart by spaces, as it shows them (now %q)",
			it.Key, it.Value, current)
	case len(huge) > 0:
		return fmt.Errorf("sysctl %s = %q: %s is beyond what any integer parameter takes (%d to %d): the kernel would refuse it at apply",
			it.Key, it.Value, strings.Join(huge, ", "), math.MinInt64, uint64(math.MaxUint64))
	}
	return fmt.Errorf("sysctl %s = %q: write %s in plain decimal, as the kernel reports it (now %q): it would read a base prefix, leading zeros or a sign its own way and report the value back in decimal, different from what was written",
		it.Key, it.Value, strings.Join(odd, ", "), current)
}

// takesCommas says whether a parameter takes commas in its value: a list
// of ports, or a CPU bitmap written in comma-separated hex words.
func takesCommas(key string) bool {
	last := key[strings.LastIndexAny(key, "./")+1:]
	return last == "ip_local_reserved_ports" || strings.Contains(last, "mask") || strings.Contains(last, "bitmap") ||
		strings.Contains(last, "cpus") || strings.Contains(last, "cpulist")
}

// withUnit reads a size with a unit, as sos.hcl writes sizes elsewhere
// ("64MiB", "4Ki", "60KB"), and gives it in bytes; ok is false for
// anything else.
func withUnit(f string) (n uint64, ok bool) {
	i := strings.IndexFunc(f, func(r rune) bool { return r < '0' || r > '9' })
	if i <= 0 {
		return 0, false
	}
	mult := map[string]uint64{
		"k": 1000, "kb": 1000, "ki": 1 << 10, "kib": 1 << 10,
		"m": 1000 * 1000, "mb": 1000 * 1000, "mi": 1 << 20, "mib": 1 << 20,
		"g": 1000 * 1000 * 1000, "gb": 1000 * 1000 * 1000, "gi": 1 << 30, "gib": 1 << 30,
	}[strings.ToLower(f[i:])]
	v, err := strconv.ParseUint(f[:i], 10, 64)
	if mult == 0 || err != nil || v > math.MaxUint64/mult {
		return 0, false
	}
	return v * mult, true
}

// ensureCongestionControl checks name against tcp_available_congestion_control
// and, when it is missing, runs modprobe tcp_<name> once per executor before
// checking again. Loading the module is the one host change planning may
// cause: without it an algorithm that is merely unloaded would look invalid.
func (s *Sysctl) ensureCongestionControl(ctx context.Context, name string) error {
	available, err := s.availableCongestionControls()
	if err != nil {
		return err
	}
	if slices.Contains(available, name) {
		return s.checkAllowedInNetns(name)
	}
	module := "tcp_" + name
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tried == nil {
		s.tried = map[string]error{}
	}
	loadErr, done := s.tried[module]
	if !done {
		if s.Root == "/" && autoloadCongestionControl(name) == nil {
			// The kernel loaded it for a socket; nothing to modprobe.
			available, err = s.availableCongestionControls()
			if err == nil && slices.Contains(available, name) {
				s.tried[module] = nil
				return s.checkAllowedInNetns(name)
			}
		}
		loadErr = s.modprobe(ctx, module)
		s.tried[module] = loadErr
	}
	if available, err = s.availableCongestionControls(); err != nil {
		return err
	}
	if slices.Contains(available, name) {
		return s.checkAllowedInNetns(name)
	}
	why := "it loaded but did not register the algorithm"
	if loadErr != nil {
		why = loadErr.Error()
	}
	return fmt.Errorf("%s = %q: congestion control not available (have: %s) and modprobe %s failed: %s",
		keyCongestionControl, name, strings.Join(available, " "), module, why)
}

// checkAllowedInNetns catches the kernel's EPERM early: outside the host's
// network namespace only algorithms listed in the global
// tcp_allowed_congestion_control may become a namespace's default.
func (s *Sysctl) checkAllowedInNetns(name string) error {
	if s.inInitNetns() {
		return nil
	}
	v, err := s.read("net.ipv4.tcp_allowed_congestion_control")
	if err != nil {
		return err
	}
	allowed := strings.Fields(v)
	if slices.Contains(allowed, name) {
		return nil
	}
	return fmt.Errorf("%s = %q: this network namespace may only use allowed congestion controls (%s); add it to net.ipv4.tcp_allowed_congestion_control in the host namespace",
		keyCongestionControl, name, strings.Join(allowed, " "))
}

// initNetnsInode is the fixed inode number recent kernels give the initial
// network namespace (PROC_NET_INIT_INO).
const initNetnsInode = 0xEFFFFFF9

// inInitNetns reports whether the calling thread is in the host's (initial)
// network namespace. It compares with the fixed inode of recent kernels,
// then with pid 1 and kthreadd (pid 2), which live there; when none of that
// can be read (a test tree, a locked-down container) it says yes, leaving
// the kernel to refuse at apply time.
func (s *Sysctl) inInitNetns() bool {
	self, err := os.Stat(filepath.Join(s.Root, "proc", "thread-self", "ns", "net"))
	if err != nil {
		return true
	}
	if st, ok := self.Sys().(*syscall.Stat_t); ok && st.Ino == initNetnsInode {
		return true
	}
	if init, err := os.Stat(filepath.Join(s.Root, "proc", "1", "ns", "net")); err == nil {
		return os.SameFile(self, init)
	}
	comm, err := os.ReadFile(filepath.Join(s.Root, "proc", "2", "comm"))
	if err == nil && strings.TrimSpace(string(comm)) == "kthreadd" {
		if kthreadd, err := os.Stat(filepath.Join(s.Root, "proc", "2", "ns", "net")); err == nil {
			return os.SameFile(self, kthreadd)
		}
	}
	return true
}

func (s *Sysctl) availableCongestionControls() ([]string, error) {
	v, err := s.read("net.ipv4.tcp_available_congestion_control")
	if err != nil {
		return nil, err
	}
	return strings.Fields(v), nil
}

// autoloadCongestionControl asks the kernel to load an algorithm the way a
// socket user does: setting TCP_CONGESTION on a throwaway socket loads
// tcp_<name> for a CAP_NET_ADMIN holder, which works under the systemd unit
// where modprobe (which needs CAP_SYS_MODULE) does not.
func autoloadCongestionControl(name string) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.SetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION, name)
}

func (s *Sysctl) modprobe(ctx context.Context, module string) error {
	if len(s.Modprobe) == 0 {
		return errors.New("no modprobe command configured")
	}
	args := append(slices.Clone(s.Modprobe[1:]), module)
	out, err := exec.CommandContext(ctx, s.Modprobe[0], args...).CombinedOutput()
	if err != nil {
		if msg := strings.TrimSpace(string(out)); msg != "" {
			return fmt.Errorf("%w: %s", err, msg)
		}
		return err
	}
	return nil
}

// Apply writes the value and reads it back, so a value the kernel silently
// clamps or rejects is reported now rather than as endless drift.
func (s *Sysctl) Apply(ctx context.Context, it item.Item) error {
	p, err := s.path(it.Key)
	if err != nil {
		return err
	}
	want := item.CanonicalSysctlValue(it.Value)
	// writeExisting never creates: a key that does not exist must fail,
	// not appear in a test tree.
	if err := writeExisting(p, want); err != nil {
		return fmt.Errorf("sysctl %s = %q: %w", it.Key, want, err)
	}
	got, err := s.read(it.Key)
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("sysctl %s: wrote %q but the kernel reports %q", it.Key, want, got)
	}
	return nil
}

// Remove is refused: a kernel parameter always exists, and rollback puts
// back its previous value with Apply.
func (s *Sysctl) Remove(ctx context.Context, it item.Item) error {
	return fmt.Errorf("sysctl %s cannot be removed, only set", it.Key)
}

// perInterface says whether a sysctl key is a parameter of one interface
// (net.ipv4.conf.eth1.rp_filter), which exists only while the interface
// does; "all" and "default" are not interfaces.
func perInterface(key string) bool {
	f := strings.Split(key, ".")
	if len(f) < 5 || f[0] != "net" || (f[1] != "ipv4" && f[1] != "ipv6") || (f[2] != "conf" && f[2] != "neigh") {
		return false
	}
	return f[3] != "all" && f[3] != "default"
}
