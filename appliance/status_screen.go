package appliance

import (
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"
)

// Screen says how to draw one frame of `status --watch`.
type Screen struct {
	Width, Height int // of the terminal; 80×24 when zero
	Tick          uint64
	Interval      time.Duration
	Now           time.Time
	// Err is why this frame's status could not be fetched; the last one
	// fetched is drawn under it.
	Err error
}

// WriteScreen draws st as one screenful: a header, then the sessions with
// their throughput, streams and reorder depth, the switches and the agents.
// No line is wider than the terminal, and sessions that do not fit its
// height are counted instead of listed. st may be nil when no status was
// fetched yet.
func WriteScreen(w io.Writer, st *Status, sc Screen) {
	if sc.Width <= 0 {
		sc.Width = 80
	}
	if sc.Height <= 0 {
		sc.Height = 24
	}
	var head, tail []string
	add := func(to *[]string, format string, args ...any) { *to = append(*to, fmt.Sprintf(format, args...)) }

	node := "(no status yet)"
	if st != nil {
		node = st.Node + " (" + strings.Join(st.Roles, ", ") + ")"
	}
	right := fmt.Sprintf("%s  every %s  #%d", sc.Now.Format("15:04:05"), sc.Interval, sc.Tick)
	head = append(head, spread("sosappliance "+node, right, sc.Width))
	if sc.Err != nil {
		add(&head, "error: %v", sc.Err)
	}
	if st == nil {
		writeLines(w, head, sc.Width)
		return
	}
	add(&head, "config sha256:%.12s  serial %d  up %s  reloads %d (%d failed)",
		st.ConfigHash, st.Serial, shortDuration(sc.Now.Sub(st.StartedAt)), st.Reloads, st.ReloadFails)
	apply := "none yet"
	if a := st.LastApply; a != nil {
		apply = fmt.Sprintf("%s %s, %d change(s)", a.At.Format("15:04:05"), a.Result, a.Changes)
	}
	add(&head, "last apply %s  drift %d correction(s)%s", apply, st.Drift.Corrections, byKind(st.Drift.ByKind))
	for _, warn := range st.Warnings {
		add(&head, "warning: %s", warn)
	}

	if len(st.Switches) > 0 {
		connected := 0
		for _, sw := range st.Switches {
			if sw.Connected {
				connected++
			}
		}
		add(&tail, "")
		add(&tail, "SWITCHES %d (%d connected)", len(st.Switches), connected)
		cols := []column{{"NAME", 12, false}, {"DATAPATH", 23, false}, {"CONN", 4, false}, {"FLOWS", 6, true}, {"LAST ERROR", 0, false}}
		tail = append(tail, row(cols, sc.Width, "NAME", "DATAPATH", "CONN", "FLOWS", "LAST ERROR"))
		for _, sw := range st.Switches {
			tail = append(tail, row(cols, sc.Width, sw.Name, sw.DatapathID, yesNo(sw.Connected), fmt.Sprint(sw.Flows), sw.LastError))
		}
	}
	if len(st.Agents) > 0 {
		down := 0
		for _, a := range st.Agents {
			if !a.Healthy {
				down++
			}
		}
		add(&tail, "")
		add(&tail, "AGENTS %d (%d down)", len(st.Agents), down)
		cols := []column{{"NAME", 12, false}, {"HEALTH", 6, false}, {"DETAIL", 0, false}}
		tail = append(tail, row(cols, sc.Width, "NAME", "HEALTH", "DETAIL"))
		for _, a := range st.Agents {
			health := "up"
			if !a.Healthy {
				health = "down"
			}
			if a.Local {
				health += "*"
			}
			tail = append(tail, row(cols, sc.Width, a.Name, health, a.Detail))
		}
	}

	var total float64
	for _, s := range st.Sessions {
		total += s.Throughput
	}
	sessions := []string{"", fmt.Sprintf("SESSIONS %d  %s", len(st.Sessions), formatRate(total))}
	if len(st.Sessions) > 0 {
		cols := []column{{"CLIENT", 21, false}, {"SERVER", 21, false}, {"STR", 3, true}, {"REORD", 5, true}, {"THROUGHPUT", 12, true}, {"AGE", 0, false}}
		if sc.Width >= 92 {
			cols = append([]column{{"AGENT", 10, false}}, cols...)
		}
		header := make([]string, len(cols))
		for i, c := range cols {
			header[i] = c.name
		}
		sessions = append(sessions, row(cols, sc.Width, header...))
		// Rows that fit between the header and the switches and agents;
		// at least a few, with the rest counted.
		room := max(sc.Height-len(head)-len(sessions)-len(tail), 3)
		shown := st.Sessions
		if len(shown) > room {
			shown = shown[:room-1]
		}
		for _, s := range shown {
			cells := []string{s.Client, s.Server, fmt.Sprint(s.Streams), fmt.Sprint(s.ReorderDepth),
				formatRate(s.Throughput), shortDuration(time.Duration(s.AgeSeconds * float64(time.Second)))}
			if len(cols) == 7 {
				cells = append([]string{s.Agent}, cells...)
			}
			sessions = append(sessions, row(cols, sc.Width, cells...))
		}
		if more := len(st.Sessions) - len(shown); more > 0 {
			sessions = append(sessions, fmt.Sprintf("  … and %d more", more))
		}
	}
	writeLines(w, append(append(head, sessions...), tail...), sc.Width)
}

// column is one column of a screen table: its heading, its width (0 for
// the last, which takes what is left) and whether it is right-aligned.
type column struct {
	name  string
	width int
	right bool
}

// row lays out cells under cols, indented by two, cutting each cell to its
// column and the line to width.
func row(cols []column, width int, cells ...string) string {
	var b strings.Builder
	b.WriteString("  ")
	for i, c := range cols {
		cell := cells[i]
		if c.width == 0 {
			b.WriteString(cell)
			break
		}
		cell = clip(cell, c.width)
		pad := strings.Repeat(" ", c.width-utf8.RuneCountInString(cell))
		if c.right {
			b.WriteString(pad + cell)
		} else {
			b.WriteString(cell + pad)
		}
		b.WriteString("  ")
	}
	return clip(strings.TrimRight(b.String(), " "), width)
}

// spread puts left and right on one line of width, right-aligned, cutting
// left if both do not fit.
func spread(left, right string, width int) string {
	room := width - utf8.RuneCountInString(right) - 2
	if room < 10 {
		return clip(left, width)
	}
	left = clip(left, room)
	return left + strings.Repeat(" ", width-utf8.RuneCountInString(left)-utf8.RuneCountInString(right)) + right
}

// clip cuts s to n columns, marking the cut with an ellipsis.
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	if n <= 0 {
		return ""
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

func writeLines(w io.Writer, lines []string, width int) {
	for _, l := range lines {
		fmt.Fprintln(w, clip(l, width))
	}
}

// shortDuration is at most six columns: 45s, 12m30s, 3h07m, 5d04h.
func shortDuration(d time.Duration) string {
	s := int64(max(d, 0) / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	case s < 86400:
		return fmt.Sprintf("%dh%02dm", s/3600, s%3600/60)
	}
	return fmt.Sprintf("%dd%02dh", s/86400, s%86400/3600)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
