package oci

import (
	"context"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/runtime"
)

var _ runtime.HealthChecker = (*Driver)(nil)

// Health implements runtime.HealthChecker: runc, cgroups, overlayfs, namespaces,
// idmapped mounts and seccomp.
func (d *Driver) Health(ctx context.Context) []runtime.Check {
	var checks []runtime.Check
	add := func(name string, ok bool, detail, degrades string) {
		c := runtime.Check{Name: name, OK: ok, Detail: detail}
		if !ok {
			c.Degrades = degrades
		}
		checks = append(checks, c)
	}

	out, err := d.runcVersion(ctx)
	add("runc", err == nil, out, "no sandbox can start; install it with: apt-get install -y runc")

	if d.cg.v2 {
		ctrl, _ := os.ReadFile(cgroupRoot + "/cgroup.controllers")
		have := strings.Fields(string(ctrl))
		missing := missingOf([]string{"cpu", "memory", "pids"}, have)
		add("cgroups", len(missing) == 0, "v2 (unified), controllers: "+strings.Join(have, " "),
			"limits on "+strings.Join(missing, ", ")+" are not enforced")
	} else {
		var have []string
		for _, c := range []string{"cpu", "memory", "pids", "freezer", "devices"} {
			if _, err := os.Stat(cgroupRoot + "/" + c); err == nil {
				have = append(have, c)
			}
		}
		missing := missingOf([]string{"cpu", "memory", "pids", "freezer", "devices"}, have)
		detail := "v1 (hybrid or legacy), controllers: " + strings.Join(have, " ")
		if d.swapAccounting {
			detail += "; swap accounting on"
		}
		add("cgroups", len(missing) == 0, detail, "limits on "+strings.Join(missing, ", ")+" are not enforced")
	}

	fs, _ := os.ReadFile("/proc/filesystems")
	add("overlayfs", strings.Contains(string(fs), "overlay"), "overlay filesystem",
		"no sandbox can start (modprobe overlay)")

	n, _ := os.ReadFile("/proc/sys/user/max_user_namespaces")
	users := strings.TrimSpace(string(n))
	add("user namespaces", users != "" && users != "0", "max_user_namespaces="+users,
		"sandboxes cannot get their own uid range; none can start")

	var uts unix.Utsname
	unix.Uname(&uts)
	rel := unix.ByteSliceToString(uts.Release[:])
	var major, minor int
	fmt.Sscanf(rel, "%d.%d", &major, &minor)
	add("idmapped overlay layers", major > 5 || (major == 5 && minor >= 19), "kernel "+rel,
		"image layers cannot be shared across sandboxes' uid ranges (needs Linux 5.19 or newer)")

	status, _ := os.ReadFile("/proc/self/status")
	add("seccomp", strings.Contains(string(status), "Seccomp:"), "seccomp filters available",
		"sandboxes run without a system-call filter")

	_, err = os.Stat("/proc/self/ns/net")
	add("network namespaces", err == nil, "each sandbox gets its own network namespace",
		"sandboxes would share the host network; none can start")
	return checks
}

func (d *Driver) runcVersion(ctx context.Context) (string, error) {
	out, err := d.runc(ctx, "--version")
	if err != nil {
		return err.Error(), err
	}
	first, _, _ := strings.Cut(string(out), "\n")
	return d.opts.Engine.Path + ": " + first, nil
}

func missingOf(want, have []string) []string {
	var out []string
	for _, w := range want {
		found := false
		for _, h := range have {
			if h == w {
				found = true
			}
		}
		if !found {
			out = append(out, w)
		}
	}
	return out
}
