package config

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

var serverPortsHint87 = regexp.MustCompile(`write (server_ports = \[[^\]]*\])`)

// TestServerPortHintPastes: 9e92390 answers a string server_port
// with a separator with "For a range or several ports write server_ports
// = [...]". That list must load when pasted in place of server_port. It
// does for "5201-5204", "5201,5202", "5000:6000" and "5000..6000"; it does
// not for "5201 - 5204" (spaces around the dash: ["5201", "-", "5204"]),
// "6000:5000" (["6000-5000"], reversed) and "-1" (["-1"], where the file
// before said server_port must be between 1 and 65535). Found by review
// (helper-87).
func TestServerPortHintPastes(t *testing.T) {
	whitelist := "whitelist \"w\" {\n  clients = [\"10.1.0.0/24\"]\n  server = \"10.2.0.9\"\n  %s\n}"
	for _, value := range []string{
		"5201-5204", "5201,5202", "5201, 5202", "5000:6000", "5000..6000", // held
		"5201 - 5204", "6000:5000", "-1", // fail on 79d1aff
	} {
		arg := "server_port = " + strconv.Quote(value)
		_, _, diags, text := loadFileOf(t, fmt.Sprintf(twoSitesWith, "", fmt.Sprintf(whitelist, arg)))
		if !diags.HasErrors() {
			t.Errorf("%s: accepted", arg)
			continue
		}
		m := serverPortsHint87.FindStringSubmatch(text)
		if m == nil {
			continue // no list offered: nothing to paste
		}
		_, _, diags2, text2 := loadFileOf(t, fmt.Sprintf(twoSitesWith, "", fmt.Sprintf(whitelist, m[1])))
		if diags2.HasErrors() {
			t.Errorf("%s: the hint says %s, which is refused in turn:\n%s\nfirst:\n%s", arg, m[1], strings.TrimSpace(text2), strings.TrimSpace(text))
		}
	}
}
