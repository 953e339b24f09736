// Command goexec times exec round trips through the Go SDK, for bench/python_exec.sh
// and bench/e2b_exec.sh: it runs `true` (as {"shell": "true"}, what the Python SDK's
// exec("true") sends; with -login as /bin/bash -l -c true, what E2B's SDKs send) in one
// running sandbox -warmup times untimed and -n times timed, and prints each timed round
// trip in microseconds, one per line. -direct runs /bin/true without a shell; -get times
// GET of the sandbox instead, the API's floor.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "goexec:", err)
		os.Exit(1)
	}
}

func run() error {
	socket := flag.String("socket", os.Getenv("AIRLOCK_SOCKET"), "the daemon's unix socket")
	sandbox := flag.String("sandbox", "", "the running sandbox to exec in")
	n := flag.Int("n", 200, "timed round trips")
	warmup := flag.Int("warmup", 20, "untimed round trips first")
	login := flag.Bool("login", false, "run /bin/bash -l -c true instead of sh -c true")
	direct := flag.Bool("direct", false, "run /bin/true itself, without a shell")
	get := flag.Bool("get", false, "time GET of the sandbox instead (the API floor)")
	flag.Parse()
	c, err := client.New(client.Options{Socket: *socket})
	if err != nil {
		return err
	}
	ctx := context.Background()
	req := api.ExecRequest{Shell: "true"}
	if *login {
		req = api.ExecRequest{Argv: []string{"/bin/bash", "-l", "-c", "true"}}
	}
	if *direct {
		req = api.ExecRequest{Argv: []string{"/bin/true"}}
	}
	for i := -*warmup; i < *n; i++ {
		start := time.Now()
		var err error
		var res *api.ExecResult
		if *get {
			_, err = c.Get(ctx, *sandbox)
		} else {
			res, err = c.Exec(ctx, *sandbox, req)
		}
		d := time.Since(start)
		if err != nil {
			return err
		}
		if res != nil && res.State != api.ExecSucceeded {
			return fmt.Errorf("exec true: state %s exit %d", res.State, res.ExitCode)
		}
		if i >= 0 {
			fmt.Println(d.Microseconds())
		}
	}
	return nil
}
