package relay

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// echo copies everything back and half-closes after the client does.
func echo(c *net.TCPConn) {
	defer c.Close()
	_, _ = io.Copy(c, c)
	_ = c.CloseWrite()
}

func TestRelayEcho(t *testing.T) {
	for _, enc := range []string{EncryptionAESGCM, EncryptionNone} {
		t.Run(enc, func(t *testing.T) {
			p := startPair(t, pairOptions{encryption: enc, streams: 4, chunk: 1000, queue: 2}, echo)
			c := p.dial(t)
			defer c.Close()
			want := make([]byte, 1<<20)
			r := rand.New(rand.NewPCG(1, 2))
			for i := range want {
				want[i] = byte(r.Uint32())
			}
			go func() {
				_, _ = c.Write(want)
				_ = c.CloseWrite()
			}()
			got, err := io.ReadAll(c)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("echo returned %d bytes, differing from the %d sent", len(got), len(want))
			}
			testsupport.Eventually(t, 30*time.Second, "session end", func() bool {
				s := p.a.Stats()
				return s.Totals.SessionsCompleted == 1 && p.b.Stats().Totals.SessionsCompleted == 1
			})
		})
	}
}
