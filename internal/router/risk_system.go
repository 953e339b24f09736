package router

import "strings"

// This file judges commands that reach the network or change the system.

// netTools reach the network whatever their arguments.
var netTools = []string{
	"ssh", "sftp", "mosh", "telnet", "ftp", "tftp", "nc", "ncat", "netcat", "socat", "ping", "ping6",
	"traceroute", "tracepath", "mtr", "dig", "nslookup", "host", "whois", "nmap", "aria2c", "axel",
	"http", "https", "xh", "httpie", "fetch", "lwp-request", "lwp-download", "GET", "POST", "ssh-copy-id",
	"gh", "hub", "glab", "openssl", "websocat", "grpcurl", "ngrok", "cloudflared", "tailscale",
}

// remoteTools act on cloud accounts and clusters.
var remoteTools = []string{
	"aws", "gcloud", "gsutil", "bq", "az", "doctl", "flyctl", "fly", "heroku", "vercel", "netlify",
	"kubectl", "helm", "k9s", "terraform", "tofu", "pulumi", "ansible", "ansible-playbook", "eksctl", "oc",
}

// netCmd is a tool that reaches the network.
func netCmd(c *cmdCtx) {
	if c.name == "openssl" && (len(c.argv) < 2 || !contains([]string{"s_client", "s_server", "ocsp"}, c.argv[1].lit)) {
		return // openssl's other commands work on local files
	}
	c.add(ReasonNetwork, 0.5, "reaches the network")
}

func remoteCmd(c *cmdCtx) {
	c.add(ReasonNetwork, 0.6, "acts on cloud or cluster resources")
}

// curlCmd reaches the network and may write files (-o, --output-dir, -c, -D).
func curlCmd(c *cmdCtx) {
	c.add(ReasonNetwork, 0.5, "reaches the network")
	o := readOpts(c.argv[1:], true, "oTdFHXAeEKrwxyYzbcmQuUD",
		"output", "output-dir", "data", "data-binary", "data-raw", "data-urlencode", "upload-file", "form",
		"header", "request", "user", "proxy", "cookie", "cookie-jar", "config", "url", "user-agent",
		"referer", "max-time", "connect-timeout", "retry", "cert", "key", "cacert", "resolve",
		"connect-to", "write-out", "dump-header", "trace", "trace-ascii", "stderr")
	for _, k := range []string{"o", "output", "output-dir", "c", "cookie-jar", "D", "dump-header", "trace", "trace-ascii", "stderr"} {
		if a, ok := o.get(k); ok && a.lit != "-" {
			c.s.writeTarget(a, "writes", c.excerpt())
		}
	}
}

// wgetCmd reaches the network and writes files (-O, -P, -o).
func wgetCmd(c *cmdCtx) {
	c.add(ReasonNetwork, 0.5, "reaches the network")
	o := readOpts(c.argv[1:], true, "OoPaTtwUeiBYbl", "output-document", "output-file", "directory-prefix",
		"append-output", "input-file", "user-agent", "tries", "timeout", "wait", "execute", "base", "level", "header")
	for _, k := range []string{"O", "output-document", "o", "output-file", "P", "directory-prefix", "a", "append-output"} {
		if a, ok := o.get(k); ok && a.lit != "-" {
			c.s.writeTarget(a, "writes", c.excerpt())
		}
	}
}

// rsyncCmd reaches the network for a remote operand, and deletes with --delete.
func rsyncCmd(c *cmdCtx) {
	o := readOpts(c.argv[1:], true, "eBfT", "rsh", "exclude", "include", "filter", "exclude-from", "include-from", "files-from", "temp-dir", "backup-dir", "port", "password-file")
	for _, a := range o.rest {
		if remoteOperand(a.lit) {
			c.add(ReasonNetwork, 0.5, "reaches the network")
			break
		}
	}
	for k := range o.set {
		if strings.HasPrefix(k, "delete") || k == "remove-source-files" {
			c.add(ReasonDelete, 0.45, "deletes files")
			c.add(ReasonRecursive, 0.3, "deletes recursively")
			break
		}
	}
	if n := len(o.rest); n >= 2 && !remoteOperand(o.rest[n-1].lit) {
		c.s.writeTarget(o.rest[n-1], "writes", c.excerpt())
	}
}

// remoteOperand reports whether an rsync or scp operand names another host (host:path, rsync://).
func remoteOperand(v string) bool {
	if strings.Contains(v, "://") {
		return true
	}
	host, _, ok := strings.Cut(v, ":")
	return ok && host != "" && !strings.Contains(host, "/")
}

// systemTools change the system whatever their arguments.
var systemTools = map[string]string{
	"umount": "unmounts filesystems", "swapon": "changes swap", "swapoff": "changes swap", "mkswap": "formats swap",
	"fdisk": "partitions disks", "sfdisk": "partitions disks", "cfdisk": "partitions disks", "parted": "partitions disks",
	"gdisk": "partitions disks", "sgdisk": "partitions disks", "wipefs": "wipes disk signatures", "losetup": "sets up loop devices",
	"cryptsetup": "changes encrypted volumes", "mkfs": "formats a filesystem", "fsck": "repairs a filesystem",
	"modprobe": "loads or unloads kernel modules", "insmod": "loads a kernel module", "rmmod": "unloads a kernel module", "depmod": "changes kernel module data",
	"useradd": "changes users", "userdel": "changes users", "usermod": "changes users", "adduser": "changes users", "deluser": "changes users",
	"groupadd": "changes groups", "groupdel": "changes groups", "groupmod": "changes groups", "addgroup": "changes groups", "delgroup": "changes groups",
	"passwd": "changes passwords", "chpasswd": "changes passwords", "chsh": "changes login shells", "chfn": "changes user data", "gpasswd": "changes groups",
	"visudo": "changes sudo rules", "vipw": "changes users", "reboot": "restarts the machine", "shutdown": "shuts the machine down",
	"halt": "stops the machine", "poweroff": "powers the machine off", "init": "changes the run level", "telinit": "changes the run level",
	"ldconfig": "changes the shared library cache", "setcap": "gives files capabilities", "setenforce": "changes SELinux enforcement",
	"update-grub": "changes the boot loader", "grub-install": "changes the boot loader", "update-initramfs": "changes the boot image",
	"dracut": "changes the boot image", "kexec": "boots another kernel", "csrutil": "changes system integrity protection",
	"nvram": "changes firmware variables", "spctl": "changes code signing policy", "mknod": "makes device files", "at": "schedules commands", "batch": "schedules commands",
}

// readSubs map system tools that also have harmless uses to what tells them apart:
// the subcommands or options that only read.
var readSubs = map[string][]string{
	"systemctl":           {"status", "show", "cat", "list-units", "list-unit-files", "list-timers", "list-sockets", "list-dependencies", "is-active", "is-enabled", "is-failed", "is-system-running", "get-default", "help", "--version"},
	"service":             {"status", "--status-all"},
	"launchctl":           {"list", "print", "help"},
	"mount":               {"-l", "--list", "-V", "--version", "-h", "--help"},
	"sysctl":              {"-a", "--all", "-n", "-N", "-b"},
	"iptables":            {"-L", "-S", "--list", "--list-rules", "-nL", "-nvL", "-vnL", "-vL"},
	"ip6tables":           {"-L", "-S", "--list", "--list-rules", "-nL", "-nvL", "-vnL", "-vL"},
	"nft":                 {"list", "-a", "--version"},
	"ufw":                 {"status", "show", "app", "version"},
	"firewall-cmd":        {"--list-all", "--state", "--get-zones", "--get-active-zones", "--list-services", "--list-ports"},
	"pfctl":               {"-s", "-sr", "-sa", "-si"},
	"ip":                  {"a", "addr", "address", "l", "link", "r", "route", "n", "neigh", "-br", "-c", "-4", "-6", "-j"},
	"crontab":             {"-l"},
	"hostnamectl":         {"status"},
	"timedatectl":         {"status", "show", "list-timezones"},
	"localectl":           {"status", "list-locales", "list-keymaps"},
	"hostname":            {"-f", "-s", "-i", "-I", "-d", "--fqdn", "--short"},
	"date":                {"+", "-u", "-R", "-I", "--iso-8601", "-d", "--date", "-r"},
	"update-alternatives": {"--display", "--query", "--list", "--get-selections"},
	"defaults":            {"read", "read-type", "domains", "find", "export"},
}

// systemWrites are, for the tools in readSubs, the words that make an otherwise read-only
// use a change (ip link set, sysctl -w, date -s).
var systemWrites = map[string][]string{
	"ip":     {"add", "del", "delete", "set", "change", "replace", "flush", "append", "prepend", "exec", "attach", "detach"},
	"sysctl": {"-w", "--write", "-p", "--load", "--system"},
	"date":   {"-s", "--set"},
	"mount":  {"-a", "--all", "-o", "-t", "--bind", "--rbind", "--move"},
}

// systemCmd is a tool that changes the system, unless it is only asked to read.
func systemCmd(c *cmdCtx) {
	if what, ok := systemTools[c.name]; ok {
		c.add(ReasonSystem, 0.8, what)
		return
	}
	args := c.argv[1:]
	for _, a := range args {
		if contains(systemWrites[c.name], a.lit) || c.name == "sysctl" && strings.Contains(a.lit, "=") {
			c.add(ReasonSystem, 0.8, "changes the system")
			return
		}
	}
	reads := readSubs[c.name]
	switch {
	case len(args) == 0:
		if c.name == "crontab" {
			c.add(ReasonSystem, 0.8, "changes scheduled jobs")
		}
		return // the rest list or show without arguments
	case c.name == "ip" && len(args) <= 2, c.name == "sysctl", c.name == "date" && strings.HasPrefix(args[0].lit, "+"):
		return
	}
	for _, a := range args {
		if contains(reads, a.lit) {
			return
		}
	}
	c.add(ReasonSystem, 0.8, "changes the system")
}

// containerReadSubs are what docker and podman may do without acting as root on the host.
var containerReadSubs = []string{"ps", "images", "version", "info", "inspect", "logs", "stats", "top", "history", "port", "diff", "events", "search", "ls", "list", "config", "help", "--version", "-v"}

// containerCmd is docker and its kin: the engine acts as root on the host, so anything
// beyond reading its state is a change to the system.
func containerCmd(c *cmdCtx) {
	o := readOpts(c.argv[1:], false, "cHl", "context", "host", "config", "log-level")
	if len(o.rest) == 0 {
		return
	}
	sub := o.rest[0].lit
	if contains([]string{"container", "image", "volume", "network", "compose", "context", "system", "buildx", "builder"}, sub) && len(o.rest) > 1 {
		sub = o.rest[1].lit // docker image ls
	}
	if contains(containerReadSubs, sub) {
		return
	}
	c.add(ReasonSystem, 0.7, "drives the container engine, which acts as root on the host")
	if sub == "pull" || sub == "push" || sub == "login" || sub == "build" || sub == "run" {
		c.add(ReasonNetwork, 0.5, "reaches the network")
	}
}
