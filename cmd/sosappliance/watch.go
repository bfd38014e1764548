package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sosappliance/sosappliance/appliance"
)

// Terminal control sequences of the watch view: the alternate screen (the
// shell's screen comes back on exit, as with top), a hidden cursor, and
// redrawing in place from the top-left corner, each line cleared to its end
// and the rest of the screen below the frame, so nothing flickers.
const (
	enterScreen = "\x1b[?1049h\x1b[?25l"
	leaveScreen = "\x1b[?25h\x1b[?1049l"
	home        = "\x1b[H"
	clearLine   = "\x1b[K"
	clearBelow  = "\x1b[J"
)

// watchStatus redraws the daemon's status every interval until ctx ends. A
// status that cannot be fetched (the daemon restarting) is said on the
// screen over the last one fetched, and the watch goes on. Off a terminal
// it writes one frame after another, for a log.
func watchStatus(ctx context.Context, out io.Writer, socket string, interval time.Duration) error {
	f, _ := out.(*os.File)
	terminal := f != nil && isTerminal(f)
	if terminal {
		io.WriteString(out, enterScreen)
		defer io.WriteString(out, leaveScreen)
	}
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	var last *appliance.Status
	for tick := uint64(1); ; tick++ {
		fctx, cancel := context.WithTimeout(ctx, max(interval, 2*time.Second))
		st, err := appliance.FetchStatus(fctx, socket)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			last = st
		}
		sc := appliance.Screen{Tick: tick, Interval: interval, Now: time.Now(), Err: err}
		if terminal {
			sc.Width, sc.Height = terminalSize(f)
		}
		var frame bytes.Buffer
		appliance.WriteScreen(&frame, last, sc)
		if terminal {
			text := strings.TrimSuffix(frame.String(), "\n")
			frame.Reset()
			frame.WriteString(home)
			frame.WriteString(strings.ReplaceAll(text, "\n", clearLine+"\r\n"))
			frame.WriteString(clearLine + clearBelow)
		} else {
			frame.WriteString("\n")
		}
		if _, err := out.Write(frame.Bytes()); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// terminalSize is read for every frame, so a resized window is filled.
func terminalSize(f *os.File) (width, height int) {
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil || ws.Col == 0 {
		return 80, 24
	}
	return int(ws.Col), int(ws.Row)
}
