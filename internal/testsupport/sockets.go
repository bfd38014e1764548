package testsupport

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// EstablishedOn counts the TCP sockets of this network namespace that are
// established with local port port: the server side of a listener's
// connections, accepted or waiting in its queue. A connection the server
// has closed is no longer established there (it waits in FIN_WAIT2 for
// its client).
func EstablishedOn(t testing.TB, port uint16) int {
	t.Helper()
	n := 0
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) < 4 || fs[3] != "01" { // 01: TCP_ESTABLISHED
				continue
			}
			i := strings.LastIndexByte(fs[1], ':')
			p, err := strconv.ParseUint(fs[1][i+1:], 16, 16)
			if err == nil && uint16(p) == port {
				n++
			}
		}
	}
	return n
}
