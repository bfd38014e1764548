package appliance

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/sosappliance/sosappliance/internal/filetrust"
)

// ConfigWatcher reports when the content of a config file changes, however
// the change was made: editors that save by writing a temp file and renaming
// it over the original, editors that truncate and rewrite in place, and
// config management that swaps a symlink (or the directory a symlink points
// into), or replaces the directory itself. It watches directories, not the
// file, because renames replace the inode a file watch would hold; and the
// parent of each, where a directory replaced is seen.
type ConfigWatcher struct {
	path   string
	settle time.Duration
	// recheck is how often the file is looked at without an event.
	recheck time.Duration
	w       *fsnotify.Watcher
	// dirs maps each directory watched to the one it was when the watch
	// was added (nil once an event said it went): a directory replaced
	// at that path is watched again. chain holds the directories the
	// path and its links run through; the others are their parents,
	// watched only to see them replaced.
	dirs  map[string]os.FileInfo
	want  map[string]bool // what the last watchDirs watched
	chain map[string]bool
	// files are the chain's files: the path and each link on its way.
	files map[string]bool
	last  [sha256.Size]byte
	// C receives one value per settled change of content.
	C chan struct{}
}

// NewConfigWatcher starts watching path. settle is how long writes must pause
// before the file is read again, so a half-written file is never loaded.
func NewConfigWatcher(path string, settle time.Duration) (*ConfigWatcher, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", path, err)
	}
	cw := &ConfigWatcher{path: path, settle: settle, recheck: recheckEvery, w: w, dirs: map[string]os.FileInfo{},
		chain: map[string]bool{}, files: map[string]bool{}, want: map[string]bool{}, C: make(chan struct{}, 1)}
	cw.last, _ = hashFile(path)
	if err := cw.watchDirs(); err != nil {
		w.Close()
		return nil, err
	}
	return cw, nil
}

// watchDirs watches the directory of the path and of every link target on
// the way, each resolved to the real directory, so a swapped symlink anywhere
// in the chain (of the file or of a directory above it) is seen; and each
// one's parent, so a directory renamed away or removed and another put in
// its place is seen, and watched in turn. Only a directory of the path
// that cannot be watched is an error; its parent is watched if it can be.
func (cw *ConfigWatcher) watchDirs() error {
	clear(cw.want)
	if err := cw.watchChain(); err != nil {
		return err
	}
	// What no longer is on the path (a release directory swapped out, a
	// ConfigMap's old ..data target) is watched no more.
	for name := range cw.dirs {
		if !cw.want[name] {
			_ = cw.w.Remove(name)
			delete(cw.dirs, name)
		}
	}
	return nil
}

func (cw *ConfigWatcher) watchChain() error {
	p := cw.path
	clear(cw.chain)
	clear(cw.files)
	for range 16 {
		// The directory as the kernel finds it: a ".." after a link
		// goes up from the link's target, not from the link.
		raw := "."
		if i := strings.LastIndexByte(p, '/'); i == 0 {
			raw = "/"
		} else if i > 0 {
			raw = p[:i]
		}
		dir := filepath.Clean(raw)
		if real, err := filepath.EvalSymlinks(raw); err == nil {
			dir = real
		}
		// Events name the file under the resolved directory (fsnotify
		// is given resolved names only: it keeps the first name of a
		// directory for its events).
		file := filepath.Join(dir, filepath.Base(p))
		cw.files[file], cw.files[filepath.Clean(p)] = true, true
		cw.chain[file], cw.chain[filepath.Clean(p)], cw.chain[dir] = true, true, true
		if err := cw.watchDir(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		// And the file itself: a write through another name of it (a
		// file bind mount, a hard link) is an event of its own watch
		// only.
		if fi, err := os.Stat(file); err == nil && fi.Mode().IsRegular() {
			_ = cw.watchDir(file)
		}
		_ = cw.watchDir(filepath.Dir(dir))
		cw.watchLinksOn(raw)
		target, err := os.Readlink(p)
		if err != nil {
			return nil
		}
		if !filepath.IsAbs(target) {
			// Relative to the link's directory as the kernel finds it.
			target = filepath.Join(dir, target)
		}
		p = target
	}
	return nil
}

// Run delivers changes on C until ctx ends.
func (cw *ConfigWatcher) Run(ctx context.Context) error {
	defer cw.w.Close()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var pending time.Time // the first event the timer waits out
	// A look now and then, events or not: a mount over a directory of
	// the path (or its unmount) raises none, nor does NFS.
	recheck := time.NewTicker(cw.recheck)
	defer recheck.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-cw.w.Events:
			if !ok {
				return errors.New("config watcher closed")
			}
			name := filepath.Clean(ev.Name)
			_, watched := cw.dirs[name]
			went := watched && ev.Has(fsnotify.Remove|fsnotify.Rename)
			if went {
				// A watched directory went (a directory above the
				// path's, renamed away, is one): the one put in its
				// place may get its inode number, and is watched anew.
				cw.dirs[name] = nil
			}
			// Any event in a directory of the path may concern us (a
			// rename of a sibling temp file, a symlink swap); the
			// content hash decides. In a parent only one naming a
			// directory of the path does: a busy /etc would hold every
			// edit off. And a directory busy for good holds an edit off
			// for maxSettle at most; a write of the file itself always
			// waits out the settle, so that a slow writer's half is
			// never read.
			if !went && !cw.chain[name] && !cw.chain[filepath.Dir(name)] {
				continue
			}
			if pending.IsZero() {
				pending = time.Now()
			}
			if cw.files[name] || time.Since(pending) < cw.maxSettle() {
				timer.Reset(cw.settle)
			}
		case err, ok := <-cw.w.Errors:
			if !ok {
				return errors.New("config watcher closed")
			}
			// An overflow loses events; treat it as a possible change.
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				timer.Reset(cw.settle)
			}
		case <-recheck.C:
			if pending.IsZero() {
				timer.Reset(0)
			}
		case <-timer.C:
			pending = time.Time{}
			// A symlink chain may point somewhere new now.
			_ = cw.watchDirs()
			sum, err := hashFile(cw.path)
			if err != nil || sum == cw.last {
				// A missing file mid-rename settles on the next event.
				continue
			}
			cw.last = sum
			select {
			case cw.C <- struct{}{}:
			default:
			}
		}
	}
}

// watchLinksOn watches the directory that holds each link among the
// directories of path as given (a "current" link to a release, swapped
// on each deploy), and takes the link into the chain: a swap of it is
// an event there.
func (cw *ConfigWatcher) watchLinksOn(path string) {
	path = filepath.Clean(path)
	for prefix := path; ; prefix = filepath.Dir(prefix) {
		if fi, err := os.Lstat(prefix); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			// The link's directory by its resolved name, as every
			// directory given to fsnotify.
			holder := filepath.Dir(prefix)
			if real, err := filepath.EvalSymlinks(holder); err == nil {
				holder = real
			}
			cw.chain[filepath.Join(holder, filepath.Base(prefix))] = true
			_ = cw.watchDir(holder)
		}
		if next := filepath.Dir(prefix); next == prefix {
			return
		}
	}
}

// watchDir watches dir, again when the directory now at that path is
// not the one watched (the old one's watch went with it, or holds a
// directory renamed elsewhere).
func (cw *ConfigWatcher) watchDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err // gone for now: its parent's watch sees it come back
	}
	cw.want[dir] = true
	old, watched := cw.dirs[dir]
	if old != nil && os.SameFile(old, fi) {
		return nil
	}
	if watched {
		_ = cw.w.Remove(dir)
	}
	if err := cw.w.Add(dir); err != nil {
		return fmt.Errorf("watch %s: %w", dir, err)
	}
	cw.dirs[dir] = fi
	return nil
}

// maxSettle is how long events that keep coming hold a look at the file
// off.
func (cw *ConfigWatcher) maxSettle() time.Duration { return max(10*cw.settle, time.Second) }

// recheckEvery is how often the watcher looks at the file without an
// event.
const recheckEvery = 10 * time.Second

// hashFile hashes a regular file; anything else (a named pipe, whose
// reading would block, or take a writer's output from the loader) is not
// read. Whether another user could change it (package filetrust), and
// which file it is, go into the hash too: a reload refused for that is
// taken once the operator puts a new file in its place, the content
// unchanged.
func hashFile(path string) ([sha256.Size]byte, error) {
	if fi, err := os.Stat(path); err != nil || !fi.Mode().IsRegular() {
		return [sha256.Size]byte{}, fmt.Errorf("%s is no regular file", path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return [sha256.Size]byte{}, err
	}
	h := sha256.New()
	h.Write(b)
	if err := filetrust.Check("config file", path); err != nil {
		h.Write([]byte("\x00" + err.Error()))
	}
	// And which file it is: the daemon refuses a file it once found
	// others could write until it is replaced, its content unchanged.
	if st, err := os.Stat(path); err == nil {
		if sys, ok := st.Sys().(*syscall.Stat_t); ok {
			fmt.Fprintf(h, "\x00%d:%d", sys.Dev, sys.Ino)
		}
	}
	return [sha256.Size]byte(h.Sum(nil)), nil
}
