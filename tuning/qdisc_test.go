package tuning

import (
	"bytes"
	"compress/gzip"
	"context"
	"github.com/sosappliance/sosappliance/internal/testsupport"
	"os"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/host/item"
)

func gzipped(t *testing.T, text string) string {
	t.Helper()
	var b bytes.Buffer
	z := gzip.NewWriter(&b)
	z.Write([]byte(text))
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// The fq qdisc is known to be there, or not, from what the kernel says of
// itself, and planning it never changes the host.
func TestSysctlValidateDefaultQdisc(t *testing.T) {
	base := map[string]string{
		"proc/sys/net/core/default_qdisc": "pfifo_fast\n",
		"proc/sys/kernel/osrelease":       "6.1.0-test\n",
	}
	tests := []struct {
		name  string
		tree  map[string]string
		value string
		want  string // empty: valid
	}{
		{"already the default", map[string]string{"proc/sys/net/core/default_qdisc": "fq\n"}, "fq", ""},
		{"built in", map[string]string{"proc/config.gz": gzipped(t, "CONFIG_NET_SCHED=y\nCONFIG_NET_SCH_FQ=y\n")}, "fq", ""},
		{"a module", map[string]string{"proc/config.gz": gzipped(t, "CONFIG_NET_SCH_FQ=m\n")}, "fq", ""},
		{"not built", map[string]string{"proc/config.gz": gzipped(t, "# CONFIG_NET_SCH_FQ is not set\nCONFIG_NET_SCH_FQ_CODEL=y\n")}, "fq",
			"the kernel has no fq qdisc (CONFIG_NET_SCH_FQ is not set"},
		{"fq_codel is not fq", map[string]string{"proc/config.gz": gzipped(t, "CONFIG_NET_SCH_FQ_CODEL=y\n")}, "fq",
			"the kernel has no fq qdisc"},
		{"loaded", map[string]string{"sys/module/sch_fq/refcnt": "0\n"}, "fq", ""},
		{"in modules.dep", map[string]string{"lib/modules/6.1.0-test/modules.dep": "kernel/net/sched/sch_fq.ko.xz:\n"}, "fq", ""},
		{"in modules.builtin", map[string]string{"lib/modules/6.1.0-test/modules.builtin": "kernel/net/sched/sch_fq.ko\n"}, "fq", ""},
		{"nothing says", nil, "fq", "the kernel shows no fq qdisc"},
		{"pfifo_fast", nil, "pfifo_fast", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			writeTree(t, root, base)
			writeTree(t, root, tt.tree)
			err := NewSysctl(root).Validate(context.Background(), []item.Item{{Kind: item.KindSysctl, Key: keyDefaultQdisc, Value: tt.value}})
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
}

// On this machine's own kernel the answer must be definite and must not
// change the default.
func TestSysctlValidateDefaultQdiscHere(t *testing.T) {
	before, err := os.ReadFile("/proc/sys/net/core/default_qdisc")
	testsupport.Require(t, err == nil, "/proc/sys/net/core/default_qdisc: %v", err)
	err = NewSysctl("/").Validate(context.Background(), []item.Item{{Kind: item.KindSysctl, Key: keyDefaultQdisc, Value: "fq"}})
	t.Logf("fq on this kernel: %v", err)
	after, _ := os.ReadFile("/proc/sys/net/core/default_qdisc")
	if !bytes.Equal(before, after) {
		t.Fatalf("validating changed the default qdisc from %q to %q", before, after)
	}
}
