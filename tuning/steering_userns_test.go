package tuning

import (
	"context"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/google/nftables"
	"github.com/sosappliance/sosappliance/host/item"
)

func openFDs() int {
	es, _ := os.ReadDir("/proc/self/fd")
	return len(es)
}

// TestSteeringTableInUserNamespace: the appliance in a container whose
// CAP_NET_ADMIN is its user namespace's (LXD unprivileged, Docker with
// userns-remap, a rootless netns): nftables works there, but
// SO_SNDBUFFORCE wants CAP_NET_ADMIN in the initial user namespace. With
// the first withSendBuffer every table write failed, where a small table
// had been written before, and nftables.New, whose socket option failed,
// leaked the netlink socket: one descriptor per attempt. Now the buffer
// falls back to SO_SNDBUF and never fails the dial. Found by review
// (helper-61).
func TestSteeringTableInUserNamespace(t *testing.T) {
	if os.Getenv("REVIEW61_USERNS") == "1" {
		ctx := context.Background()
		if err := exec.Command("ip", "link", "set", "lo", "up").Run(); err != nil {
			t.Logf("lo up: %v", err)
		}
		items := steeringItems(t, testSteeringSpec())
		tbl := itemOf(items, item.SteeringKeyNftables)
		s := NewSteering()
		before := openFDs()
		var err error
		for range 5 {
			err = s.Apply(ctx, tbl)
		}
		after := openFDs()
		// Control: the same namespace, without the forced buffer.
		c, cerr := nftables.New()
		if cerr == nil {
			c.AddTable(&nftables.Table{Name: "review61", Family: nftables.TableFamilyIPv4})
			cerr = c.Flush()
		}
		t.Logf("control, a table written without SO_SNDBUFFORCE: err %v", cerr)
		t.Logf("apply of the table in a user namespace: %v; open descriptors %d before, %d after 5 attempts", err, before, after)
		if err != nil {
			t.Errorf("steering table not written in a user namespace with CAP_NET_ADMIN: %v", err)
		}
		if after > before {
			t.Errorf("%d descriptors leaked by 5 attempts", after-before)
		}
		return
	}
	if os.Geteuid() != 0 {
		t.Fatal("needs root to map uid 0 into a user namespace")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSteeringTableInUserNamespace$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "REVIEW61_USERNS=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}},
	}
	out, err := cmd.CombinedOutput()
	t.Logf("child in a new user and network namespace:\n%s", out)
	if err != nil {
		t.Errorf("child: %v", err)
	}
}
