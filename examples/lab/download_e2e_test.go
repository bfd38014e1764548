package lab_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/examples/lab/labnet"
)

// upLab brings the lab up with opts, its progress going to the test log,
// and takes it down when the test ends, showing each node's log tail first
// if the test failed.
func upLab(ctx context.Context, t *testing.T, opts labnet.Options) *labnet.Lab {
	t.Helper()
	opts.Progress = logWriter{t}
	lab, err := labnet.Up(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range lab.Nodes() {
				t.Logf("--- %s log (tail) ---\n%s", n.Name, lab.LogTail(n.Name, 25))
			}
		}
		if err := lab.Down(); err != nil {
			t.Errorf("teardown: %v", err)
		}
	})
	return lab
}

// serveFilesOn serves the lab's files on host at addr until the test ends.
func serveFilesOn(t *testing.T, lab *labnet.Lab, host labnet.Host, addr netip.AddrPort, files *fileServer) {
	t.Helper()
	ln, err := lab.Listen(host, "tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: files, ReadHeaderTimeout: 30 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
}

// bigPrefixSum is the SHA-256 of the first size bytes of the big file.
func bigPrefixSum(t *testing.T, files *fileServer, size int64) []byte {
	t.Helper()
	want := sha256.New()
	f, err := os.Open(files.bigPath)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.CopyN(want, f, size)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	return want.Sum(nil)
}

// download is a curl fetch of /big from the lab's file server, hashed and
// counted as it arrives.
type download struct {
	sum    hash.Hash
	n      countWriter
	stderr bytes.Buffer
	done   chan error
	// start is when curl started; remote is the client address and port
	// the file server saw.
	start  time.Time
	remote netip.AddrPort
}

// startDownload runs curl on host with args (options, then the URL of
// /big) and returns once the file server has seen the request, with the
// transfer running.
func startDownload(ctx context.Context, t *testing.T, lab *labnet.Lab, host labnet.Host, files *fileServer, args ...string) *download {
	t.Helper()
	d := &download{sum: sha256.New(), done: make(chan error, 1)}
	seen := files.watch("/big")
	cmd := lab.Command(ctx, host, "curl", append([]string{"-sS", "--fail"}, args...)...)
	cmd.Stdout, cmd.Stderr = io.MultiWriter(d.sum, &d.n), &d.stderr
	d.start = time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.done <- cmd.Wait() }()
	select {
	case d.remote = <-seen:
	case err := <-d.done:
		t.Fatalf("curl ended before the server saw the request: %v: %s", err, d.stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatal("the server saw no request within 30 s")
	}
	return d
}

// wait waits for curl to end; its error carries what curl printed.
func (d *download) wait() error {
	if err := <-d.done; err != nil {
		return fmt.Errorf("%w: %s", err, d.stderr.String())
	}
	return nil
}

// requireBig fails the test unless d received the whole big file, byte
// for byte.
func (d *download) requireBig(t *testing.T, files *fileServer) {
	t.Helper()
	if int64(d.n) != bigSize {
		t.Fatalf("downloaded %d bytes, want %d", d.n, bigSize)
	}
	if got := hex.EncodeToString(d.sum.Sum(nil)); got != files.bigSum {
		t.Fatalf("sha256 %s, want %s", got, files.bigSum)
	}
}
