package ofp13_test

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/sdn/ofp13"
)

// roleGoldens reads testdata/role/*.golden, the same format as the other
// goldens (kept apart because ovs-ofctl names the role status ONFT_, which
// the general golden test does not expect).
func roleGoldens(t testing.TB) []golden {
	t.Helper()
	f, err := os.Open("testdata/role/roles.golden")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []golden
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "> "), strings.HasPrefix(line, "< "):
			raw, err := hex.DecodeString(line[2:])
			if err != nil {
				t.Fatalf("roles.golden:%d: %v", n, err)
			}
			out = append(out, golden{where: fmt.Sprintf("roles.golden:%d", n), raw: raw})
		case strings.HasPrefix(line, "#| ") && len(out) > 0:
			out[len(out)-1].printed = append(out[len(out)-1].printed, line[3:])
		}
	}
	return out
}

var reRole = regexp.MustCompile(`^(\S+) \(OF1\.3\) \(xid=0x([0-9a-f]+)\): role=(\S+)(?: generation_id=(\d+))?(?: reason=(\S+))?$`)

// ovsRole is how Open vSwitch 3.x prints a role.
var ovsRole = map[ofp13.ControllerRole]string{ofp13.RoleNoChange: "nochange", ofp13.RoleEqual: "equal",
	ofp13.RoleMaster: "primary", ofp13.RoleSlave: "secondary"}

var ovsReason = map[ofp13.RoleStatusReason]string{ofp13.RoleReasonMasterRequest: "primary_request",
	ofp13.RoleReasonConfig: "configuration_changed", ofp13.RoleReasonExperimenter: "experimenter_data_changed"}

// TestRoleGoldens decodes every role message Open vSwitch exchanged with
// two controllers, re-encodes it to the same bytes and checks it against
// ovs-ofctl's reading.
func TestRoleGoldens(t *testing.T) {
	seen := map[string]bool{}
	for _, g := range roleGoldens(t) {
		m, err := ofp13.Unmarshal(g.raw)
		if err != nil {
			t.Errorf("%s: decode: %v", g.where, err)
			continue
		}
		again, err := m.MarshalBinary()
		if err != nil || !bytes.Equal(again, g.raw) {
			t.Errorf("%s: re-encoded %T: %x, %v; want %x", g.where, m, again, err, g.raw)
		}
		seen[fmt.Sprintf("%T", m)] = true
		var name string
		var role ofp13.ControllerRole
		var gen uint64
		reason := ""
		switch m := m.(type) {
		case *ofp13.RoleRequest:
			name, role, gen = "OFPT_ROLE_REQUEST", m.Role, m.GenerationID
		case *ofp13.RoleReply:
			name, role, gen = "OFPT_ROLE_REPLY", m.Role, m.GenerationID
		case *ofp13.RoleStatus:
			name, role, gen, reason = "ONFT_ROLE_STATUS", m.Role, m.GenerationID, ovsReason[m.Reason]
		case *ofp13.Error:
			if m.Type != ofp13.ErrorTypeRoleRequestFailed || m.Code != ofp13.RoleRequestFailedStale {
				t.Errorf("%s: error %v, want a stale role request", g.where, m)
			}
			if err := expect(g.printed[0], fmt.Sprintf("OFPT_ERROR (OF1.3) (xid=0x%x): %s", m.XID, m.CodeName())); err != nil {
				t.Errorf("%s: %v", g.where, err)
			}
			if off, err := ofp13.Unmarshal(m.Data); err != nil || off.MessageType() != ofp13.TypeRoleRequest {
				t.Errorf("%s: offending request %v, %v", g.where, off, err)
			}
			seen["stale"] = true
			continue
		default:
			t.Errorf("%s: unexpected %T", g.where, m)
			continue
		}
		p := reRole.FindStringSubmatch(g.printed[0])
		if p == nil {
			t.Errorf("%s: cannot parse %q", g.where, g.printed[0])
			continue
		}
		xid, _ := strconv.ParseUint(p[2], 16, 32)
		got := fmt.Sprintf("%s xid=%d role=%s", name, m.TransactionID(), ovsRole[role])
		want := fmt.Sprintf("%s xid=%d role=%s", p[1], xid, p[3])
		if p[4] != "" {
			got += fmt.Sprintf(" gen=%d", gen)
			want += " gen=" + p[4]
		}
		got += " reason=" + reason
		want += " reason=" + p[5]
		if err := expect(got, want); err != nil {
			t.Errorf("%s: %v", g.where, err)
		}
	}
	for _, want := range []string{"*ofp13.RoleRequest", "*ofp13.RoleReply", "*ofp13.RoleStatus", "stale"} {
		if !seen[want] {
			t.Errorf("no golden role message decodes to %s", want)
		}
	}
}

func roleSamples() []ofp13.Message {
	return []ofp13.Message{
		&ofp13.RoleRequest{XID: 3, Role: ofp13.RoleMaster, GenerationID: 1<<63 + 5},
		&ofp13.RoleRequest{XID: 4, Role: ofp13.RoleSlave, GenerationID: 0},
		&ofp13.RoleReply{XID: 5, Role: ofp13.RoleEqual, GenerationID: 42},
		&ofp13.RoleStatus{XID: 0, Role: ofp13.RoleSlave, Reason: ofp13.RoleReasonConfig, GenerationID: 7},
	}
}

func TestRoleRoundTrip(t *testing.T) {
	for _, m := range roleSamples() {
		raw, err := m.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		back, err := ofp13.Unmarshal(raw)
		if err != nil {
			t.Fatalf("%T: %v", m, err)
		}
		if !reflect.DeepEqual(m, back) {
			t.Errorf("round trip:\n got %#v\nwant %#v", back, m)
		}
	}
}

// TestRoleDecodeErrors: a short or long role message, or an ONF role status
// of the wrong size, is a *DecodeError naming the problem; another
// experimenter message stays raw.
func TestRoleDecodeErrors(t *testing.T) {
	req, _ := (&ofp13.RoleRequest{XID: 1, Role: ofp13.RoleMaster, GenerationID: 9}).MarshalBinary()
	st, _ := (&ofp13.RoleStatus{Role: ofp13.RoleSlave}).MarshalBinary()
	withLen := func(b []byte, n int) []byte {
		out := make([]byte, n)
		copy(out, b)
		out[2], out[3] = byte(n>>8), byte(n)
		return out
	}
	for _, tc := range []struct {
		name string
		raw  []byte
		kind error
	}{
		{"request short", withLen(req, 20), ofp13.ErrTruncated},
		{"request long", withLen(req, 28), ofp13.ErrTrailingData},
		{"status short", withLen(st, 24), ofp13.ErrTruncated},
		{"status long", withLen(st, 40), ofp13.ErrTrailingData},
	} {
		_, err := ofp13.Unmarshal(tc.raw)
		var de *ofp13.DecodeError
		if !errors.As(err, &de) || !errors.Is(err, tc.kind) {
			t.Errorf("%s: %v, want a %v DecodeError", tc.name, err, tc.kind)
		}
	}
	other := slicesClone(st)
	other[15] = 1 // exp_type 1910
	m, err := ofp13.Unmarshal(other)
	if _, raw := m.(*ofp13.Raw); err != nil || !raw {
		t.Errorf("other experimenter message: %T, %v; want *ofp13.Raw", m, err)
	}
	if got := (&ofp13.Error{Type: ofp13.ErrorTypeRoleRequestFailed, Code: ofp13.RoleRequestFailedStale}).CodeName(); got != "OFPRRFC_STALE" {
		t.Errorf("code name %q", got)
	}
}

func slicesClone(b []byte) []byte { return append([]byte(nil), b...) }

// FuzzRole feeds role bodies behind valid headers of the three role
// message kinds; each decode must hold the re-encoding property.
func FuzzRole(f *testing.F) {
	for _, g := range roleGoldens(f) {
		f.Add(g.raw[1], g.raw[8:])
	}
	for _, m := range roleSamples() {
		raw, _ := m.MarshalBinary()
		f.Add(raw[1], raw[8:])
	}
	f.Fuzz(func(t *testing.T, typ byte, body []byte) {
		if len(body) > 256 {
			return
		}
		switch typ % 3 {
		case 0:
			typ = byte(ofp13.TypeRoleRequest)
		case 1:
			typ = byte(ofp13.TypeRoleReply)
		default:
			typ = byte(ofp13.TypeExperimenter)
		}
		raw := append([]byte{ofp13.Version, typ, 0, 0, 0, 0, 0, 1}, body...)
		raw[2], raw[3] = byte(len(raw)>>8), byte(len(raw))
		checkReencode(t, raw)
	})
}
