package cluster

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// moreLog keeps the warnings an elector logs.
type moreLog struct {
	mu   sync.Mutex
	msgs []string
}

func (l *moreLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *moreLog) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		l.mu.Lock()
		l.msgs = append(l.msgs, r.Message)
		l.mu.Unlock()
	}
	return nil
}
func (l *moreLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *moreLog) WithGroup(string) slog.Handler      { return l }
func (l *moreLog) count(sub string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.msgs {
		if strings.Contains(m, sub) {
			n++
		}
	}
	return n
}

func moreStart(t *testing.T, cfg Config, lg *moreLog) *Elector {
	t.Helper()
	cli, err := Open(cfg, slog.New(lg))
	if err != nil {
		t.Fatal(err)
	}
	el := cli.Elector(nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { el.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
		cli.Close()
		<-done
	})
	return el
}
