package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// podNet is one replica's network: a namespace joined to the root namespace by a veth pair
// on a point-to-point /30, as a pod's interface is joined to its node. In the fallback
// (no namespaces allowed) it is only a distinct loopback address.
type podNet struct {
	ns     string // "" in the loopback fallback
	hostIf string
	hostIP string
	IP     string // the replica's address
}

const netPrefix = "10.213" // 10.213.<i>.0/30: host .1, replica .2

func runCmd(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// netnsAvailable reports whether this process may create network namespaces.
func netnsAvailable() error {
	const probe = "tdscale-probe"
	if err := runCmd("ip", "netns", "add", probe); err != nil {
		return err
	}
	return runCmd("ip", "netns", "del", probe)
}

// setupPodNet creates replica i's namespace and veth pair, removing what a crashed earlier
// run left under the same names, unless processes still run in it.
func setupPodNet(i int) (*podNet, error) {
	n := &podNet{
		ns:     fmt.Sprintf("tdscale-%d", i),
		hostIf: fmt.Sprintf("tdsc%dh", i),
		hostIP: fmt.Sprintf("%s.%d.1", netPrefix, i),
		IP:     fmt.Sprintf("%s.%d.2", netPrefix, i),
	}
	if _, err := os.Stat(filepath.Join("/var/run/netns", n.ns)); err == nil {
		out, _ := exec.Command("ip", "netns", "pids", n.ns).Output()
		if len(strings.TrimSpace(string(out))) > 0 {
			return nil, fmt.Errorf("namespace %s exists with processes in it (%s): is another scale test running?", n.ns, strings.Fields(string(out)))
		}
		n.teardown()
	}
	nsIf := fmt.Sprintf("tdsc%dn", i)
	steps := [][]string{
		{"ip", "netns", "add", n.ns},
		{"ip", "link", "add", n.hostIf, "type", "veth", "peer", "name", nsIf},
		{"ip", "link", "set", nsIf, "netns", n.ns},
		{"ip", "addr", "add", n.hostIP + "/30", "dev", n.hostIf},
		{"ip", "link", "set", n.hostIf, "up"},
		{"ip", "netns", "exec", n.ns, "ip", "addr", "add", n.IP + "/30", "dev", nsIf},
		{"ip", "netns", "exec", n.ns, "ip", "link", "set", nsIf, "up"},
		{"ip", "netns", "exec", n.ns, "ip", "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if err := runCmd(s[0], s[1:]...); err != nil {
			n.teardown()
			return nil, err
		}
	}
	return n, nil
}

// loopbackPodNet is the fallback: 127.0.0.1<i>, no isolation beyond the address.
func loopbackPodNet(i int) *podNet { return &podNet{IP: "127.0.0." + strconv.Itoa(10+i)} }

// exec returns the command prefix that runs a program inside the namespace.
func (n *podNet) exec() []string {
	if n.ns == "" {
		return nil
	}
	return []string{"ip", "netns", "exec", n.ns}
}

// teardown deletes the namespace, which deletes its end of the veth pair and with it the
// pair; the host end is deleted too in case the namespace was already gone.
func (n *podNet) teardown() {
	if n.ns == "" {
		return
	}
	runCmd("ip", "netns", "del", n.ns)
	runCmd("ip", "link", "del", n.hostIf)
}
