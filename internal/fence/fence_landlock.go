package fence

import (
	"errors"
	"os"

	"github.com/landlock-lsm/go-landlock/landlock"
)

// fenceLandlockConfigs are the rulesets that handle every right of each ABI, V1 first.
var fenceLandlockConfigs = []landlock.Config{
	landlock.V1, landlock.V2, landlock.V3, landlock.V4, landlock.V5, landlock.V6,
	landlock.V7, landlock.V8, landlock.V9, landlock.V10, landlock.V11,
}

// fenceSystemRead is the read-only (and executable) system.
var fenceSystemRead = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/proc", "/sys"}

// fenceDevices are the device nodes a command may open, read, write and (from ABI 5)
// ioctl. Nothing else under /dev, so no disks, however the command's uid stands.
var fenceDevices = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"}

// fenceRuleset builds the Landlock ruleset for spec: every right the kernel's ABI knows is
// handled (so denied unless a rule grants it), and TCP bind and connect are granted
// nowhere without the network. It returns the ruleset's descriptor and its flags, for
// landlock_restrict_self on the thread that then execs.
func fenceRuleset(spec fenceSpec, abi int, shm bool) (int, uint32, error) {
	cfg := fenceLandlockConfigs[min(abi, len(fenceLandlockConfigs))-1]
	if spec.Network {
		cfg.HandledAccessNet = 0
	}
	if abi >= 7 {
		cfg = cfg.EnableLoggingForSubprocesses() // denials of the command reach the audit log
	}
	readDirs, readFiles := fenceByKind(fenceSystemRead)
	if spec.Access == "ro" {
		readDirs = append(readDirs, spec.Workspace)
	}
	d, f := fenceByKind(spec.ExtraRead)
	readDirs, readFiles = append(readDirs, d...), append(readFiles, f...)
	if spec.Resolv != "" {
		readFiles = append(readFiles, spec.Resolv)
	}
	writeDirs, writeFiles := fenceByKind(spec.ExtraWrite)
	if spec.Access == "rw" {
		writeDirs = append(writeDirs, spec.Workspace)
	}
	if spec.Scratch != "" {
		writeDirs = append(writeDirs, spec.Scratch)
	}
	if shm {
		writeDirs = append(writeDirs, "/dev/shm")
	}
	rules := []landlock.Rule{
		landlock.RODirs(readDirs...),
		landlock.RWFiles(fenceDevices...).WithIoctlDev().IgnoreIfMissing(),
	}
	if len(readFiles) > 0 {
		rules = append(rules, landlock.ROFiles(readFiles...))
	}
	if len(writeFiles) > 0 {
		rules = append(rules, landlock.RWFiles(writeFiles...))
	}
	if len(writeDirs) > 0 {
		rw := landlock.RWDirs(writeDirs...)
		if abi >= 2 {
			rw = rw.WithRefer() // rename and link across directories, as git and package managers do
		}
		rules = append(rules, rw)
	}
	fd, flags, err := cfg.NewRulesetFD(rules...)
	if err == nil && fd < 0 {
		err = errors.New("empty ruleset")
	}
	return fd, flags, err
}

// fenceByKind splits existing paths into directories and other files, leaving out those
// that do not exist.
func fenceByKind(paths []string) (dirs, files []string) {
	for _, p := range paths {
		fi, err := os.Stat(p)
		switch {
		case err != nil:
		case fi.IsDir():
			dirs = append(dirs, p)
		default:
			files = append(files, p)
		}
	}
	return dirs, files
}
